"""The whole game tree of a small two-player zero-sum :class:`~rl_gpu.envs.base.TensorEnv`, enumerated through the
environment's own pure functions, and the exact values of a policy over it.

Shape legend: C = chance outcomes (episode starts), n = nodes, S = information states, O = observation size,
A = actions.

The tree is built level by level: the C starts the environment lists with their probabilities
(:meth:`TensorEnv.chance_outcomes`; all of a game's randomness must be in its start), then every legal action of
every live node at once through ``_transition``. An information state is one distinct ``(observation, seat to
act)`` of a decision node, so a policy over observations is a policy over information states, one row each.

The values (:meth:`GameTree.evaluate`) assume perfect recall, which the build checks: every node of an information
state has the same last own information state and action behind it (so, by induction, the same whole own
history). An observation that forgets (RussianRoulette's PEEK result) is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rl_gpu.envs.base import TensorEnv

MAX_NODES = 2_000_000
"""Largest tree built (Leduc Hold'em has 10,200 nodes from its 120 deals); a larger game is refused while its tree
is being walked."""


@dataclass(frozen=True)
class TreeValues:
    """One exact evaluation of a policy over the tree."""

    q: Tensor
    """``[S, A]`` float64: counterfactual action values of the seat acting at each information state, its expected
    return after the action weighted by the probability that chance and the opponent reach the state (0 off the
    legal actions)."""
    own_reach: Tensor
    """``[S]`` float64: the acting seat's own probability of reaching each information state."""
    value: Tensor
    """``[2]`` float64: each seat's expected return from the start."""
    win_rate: Tensor
    """0-dim float64: the probability that seat 0's return is positive."""
    game_length: Tensor
    """0-dim float64: the expected number of actions in a game."""


def _rows(inner: tuple, index: Tensor) -> tuple:
    return type(inner)(*(field[index] for field in inner))


class GameTree:
    """Every history of ``env``'s game (its class's rules; the batch's own rows are not touched) as flat tensors.

    Raises ``ValueError`` (saying why) for a game this cannot enumerate: not two players, no
    :meth:`~rl_gpu.envs.base.TensorEnv.chance_outcomes`, continuous actions, a tree over ``max_nodes``, a
    non-zero-sum reward, an information state whose nodes differ in legal actions, or imperfect recall.
    """

    def __init__(self, env: TensorEnv, max_nodes: int = MAX_NODES) -> None:
        name = type(env).__name__
        if env.num_players != 2 or env.is_continuous:
            raise ValueError(f"{name} is not a two-player game with discrete actions")
        starts = env.chance_outcomes()
        if starts is None:
            raise ValueError(f"{name} does not list its chance outcomes (TensorEnv.chance_outcomes), so its tree "
                             "cannot be enumerated")
        inner, chance = starts
        device = chance.device
        count = chance.shape[0]
        # Per node: its parent and the action from it (-1 at the starts), each seat's reward on the way in.
        parent = [torch.full((count,), -1, device=device)]
        action = [torch.full((count,), -1, device=device)]
        reward = [torch.zeros(count, 2, dtype=torch.float64, device=device)]
        decision_nodes, decision_obs, decision_mask, decision_player = [], [], [], []
        frontier, ids, depth = inner, torch.arange(count, device=device), 0
        levels = [ids]
        while ids.numel():
            obs = env._observe(frontier).flatten(1)
            mask = env._legal_actions(frontier)
            decision_nodes.append(ids), decision_obs.append(obs), decision_mask.append(mask)
            decision_player.append(env._current_player(frontier))
            row, act = torch.nonzero(mask, as_tuple=True)
            if count + row.numel() > max_nodes:
                raise ValueError(f"{name}'s game tree has more than {max_nodes:,} nodes")
            nxt, rew, terminated = env._transition(_rows(frontier, row), act)
            rew = rew.double().reshape(-1, 2)
            if not torch.allclose(rew.sum(1), torch.zeros_like(rew[:, 0]), atol=1e-6):
                raise ValueError(f"{name} is not zero-sum: a transition's rewards do not sum to 0")
            child = torch.arange(count, count + row.numel(), device=device)
            count += row.numel()
            parent.append(ids[row]), action.append(act), reward.append(rew)
            levels.append(child)
            live = ~terminated
            frontier, ids = _rows(nxt, torch.nonzero(live)[:, 0]), child[live]
            depth += 1
            if env.max_game_length is not None and depth > env.max_game_length and ids.numel():
                raise ValueError(f"{name} has games longer than its max_game_length {env.max_game_length}")
        self.parent = torch.cat(parent)
        self.action = torch.cat(action)
        self.edge_reward = torch.cat(reward)
        """``[n, 2]``: each seat's reward on the transition into the node (0 at the starts)."""
        self.levels = [level for level in levels if level.numel()]
        nodes = torch.cat(decision_nodes)
        key = torch.cat((torch.cat(decision_obs), torch.cat(decision_player)[:, None].float()), dim=1)
        keys, info = torch.unique(key, dim=0, return_inverse=True)
        mask = torch.cat(decision_mask)
        num_info, num_actions = keys.shape[0], mask.shape[1]
        self.obs = keys[:, :-1].contiguous()
        """``[S, O]`` float32: the observation of each information state."""
        self.player = keys[:, -1].long()
        """``[S]``: the seat acting at each information state."""
        self.mask = torch.zeros(num_info, num_actions, dtype=torch.bool, device=device).index_put_((info,), mask)
        """``[S, A]`` bool: legal actions."""
        if not torch.equal(self.mask[info], mask):
            raise ValueError(f"{name}: nodes that look the same to the seat to act have different legal actions")
        n = self.parent.shape[0]
        self.info = torch.full((n,), -1, device=device).index_put_((nodes,), info)
        """``[n]``: the information state of each decision node, -1 at terminal nodes."""
        self.decisions = nodes
        up = self.parent.clamp(min=0)
        self.moves = torch.nonzero(self.parent >= 0)[:, 0]
        """Nodes reached by an action (every node but the starts)."""
        self.mover = torch.zeros(n, dtype=torch.long, device=device)
        self.mover[self.moves] = self.player[self.info[up[self.moves]]]
        self.mover_info = torch.where(self.parent >= 0, self.info[up], 0)
        self.chance = torch.zeros(n, dtype=torch.float64, device=device)
        self.chance[: chance.shape[0]] = chance.double()
        self.terminal = self.info < 0
        # Per terminal history (0 elsewhere), for the statistics of a policy's games: its length, and whether
        # seat 0's return along it is positive.
        depth = torch.zeros(n, dtype=torch.float64, device=device)
        seat0_return = torch.zeros(n, dtype=torch.float64, device=device)
        for d, level in enumerate(self.levels):
            depth[level] = float(d)
            if d:
                seat0_return[level] = seat0_return[self.parent[level]] + self.edge_reward[level, 0]
        self._end_length = depth * self.terminal
        self._end_won = (self.terminal & (seat0_return > 0)).double()
        self._check_perfect_recall(name, num_actions)

    def _check_perfect_recall(self, name: str, num_actions: int) -> None:
        # last[h, p]: (information state * A + action) of seat p's last decision before h, -1 before any.
        n = self.parent.shape[0]
        last = torch.full((n, 2), -1, device=self.parent.device)
        for level in self.levels[1:]:
            up = self.parent[level]
            last[level] = last[up]
            code = self.info[up] * num_actions + self.action[level]
            last[level, self.mover[level]] = code
        seat = self.player[self.info[self.decisions]]
        history = last[self.decisions, seat]
        where = self.info[self.decisions]
        highest = torch.full((self.obs.shape[0],), -2, device=history.device)
        highest = highest.scatter_reduce(0, where, history, "amax", include_self=False)
        lowest = torch.full_like(highest, -2).scatter_reduce(0, where, history, "amin", include_self=False)
        if not torch.equal(highest, lowest):
            raise ValueError(f"{name}'s observations do not give perfect recall (one observation stands for "
                             "histories in which the seat to act saw or did different things)")

    @property
    def num_nodes(self) -> int:
        return self.parent.shape[0]

    @property
    def num_transitions(self) -> int:
        """Actions in the tree (its nodes that are not starts)."""
        return self.moves.shape[0]

    def uniform(self) -> Tensor:
        """``[S, A]`` float64: uniform over the legal actions."""
        return self.mask.double() / self.mask.sum(1, keepdim=True)

    def _reach(self, probs: Tensor) -> tuple[Tensor, Tensor]:
        """``(step [n], reach [n, 3])``: the probability of the move into each node (chance's at the starts), and
        each node's reach by seat 0's own actions, seat 1's and chance."""
        step = torch.where(self.parent >= 0, probs[self.mover_info, self.action.clamp(min=0)], self.chance)
        column = torch.where(self.parent >= 0, self.mover, 2)
        reach = torch.ones(self.num_nodes, 3, dtype=torch.float64, device=probs.device)
        reach[self.levels[0], 2] = step[self.levels[0]]
        for level in self.levels[1:]:
            reach[level] = reach[self.parent[level]]
            reach[level, column[level]] *= step[level]
        return step, reach

    def _own(self, reach: Tensor) -> Tensor:
        own = torch.zeros(self.obs.shape[0], dtype=torch.float64, device=reach.device)
        decisions = self.decisions
        own[self.info[decisions]] = reach[decisions, self.player[self.info[decisions]]]
        return own

    def own_reach(self, probs: Tensor) -> Tensor:
        """``[S]`` float64: the acting seat's own probability of reaching each information state under ``probs``
        (a product of the policy's own probabilities alone: what averaging policies needs, without values)."""
        return self._own(self._reach(probs)[1])

    def evaluate(self, probs: Tensor) -> TreeValues:
        """Exact values of the policy ``probs`` (``[S, A]`` float64, rows summing to 1 over the legal actions)
        played by both seats.

        With reach r_p(h) (seat p's own product of action probabilities to h), r_c(h) chance's, and v_p(h) seat
        p's expected return from h on: q(I, a) = sum over h in I of r_{-p}(h) r_c(h) (reward_p(h, a) +
        v_p(h a)), where p acts at I."""
        n = self.num_nodes
        up = self.parent.clamp(min=0)
        step, reach = self._reach(probs)
        after = torch.zeros(n, 2, dtype=torch.float64, device=probs.device)  # reward into h + value from h on
        for level in reversed(self.levels[1:]):
            after[level] += self.edge_reward[level]
            after.index_add_(0, self.parent[level], step[level, None] * after[level])
        moves = self.moves
        seat = self.mover[moves]
        others = reach[up[moves], 1 - seat] * reach[up[moves], 2]
        q = torch.zeros_like(probs).index_put_((self.mover_info[moves], self.action[moves]),
                                               others * after[moves].gather(1, seat[:, None])[:, 0],
                                               accumulate=True)
        own = self._own(reach)
        starts = self.levels[0]
        value = (self.chance[starts, None] * after[starts]).sum(0)
        path = reach.prod(1)  # each history's probability
        return TreeValues(q, own, value, (path * self._end_won).sum(), (path * self._end_length).sum())
