"""Which self-play update rules reach a Nash equilibrium of Leduc Hold'em at all, with the sampling removed.

The rules run *full width*: each iteration evaluates the current policy exactly over the whole game tree of
OpenSpiel's game (every deal, every action sequence) and applies the rule's expected update to a table of
logits, one row per information state. Without a network or sampling noise, what a rule does here is the best
its sampled, neural form can hope for; ``neurd-sampled`` then adds the sampling, ``--network`` the network. Exploitability is OpenSpiel's, for the last iterate and for the
average policy (iterate t weighted by the player's own reach of the information state, times t with
``--average linear``, CFR+'s linear averaging, or times 1 with ``--average uniform``; for every rule).

Rules (A(I, a) = q(I, a) - sum_b pi(b | I) q(I, b), q the counterfactual value: the acting player's
expected return after playing a at I, weighted by the probability that chance and the opponent reach I):

- ``cfr+``: regret matching+ on cumulative A, simultaneous updates, linear averaging (OpenSpiel's CFR+ with
  ``alternating_updates=False``; the reference line).
- ``pg``: softmax policy gradient, ``logits += eta * own(I) * pi(a | I) * A(I, a)``, own(I) the acting
  player's reach of I. This is the expectation of PPO's update (the surrogate's gradient at ratio 1, on-policy
  visits weight I by own x opponent x chance reach), without advantage normalisation or entropy bonus.
- ``neurd-onpolicy``: Neural Replicator Dynamics' logit update ``logits += eta * own(I) * A(I, a)``: no
  pi factor, but on-policy weighting, what a sampled all-actions update gives without importance weights.
- ``neurd``: ``logits += eta * A(I, a)``: Hedge on counterfactual values at every information state
  (counterfactual weighting; sampled, it needs a 1 / own(I) importance weight).
- ``neurd-sampled``: ``neurd`` from sampled games instead of the full tree: ``--games`` self-play games per
  iteration, q(I, a) from a table moved towards each batch's mean sampled return (``--q-step``; 1: the
  latest batch's mean wherever (I, a) was played, older values only where it was not), each visit of I
  weighted 1 / own(I) (so the expected step is ``neurd``'s), logits kept within ``--logit-bound`` of the
  largest (without a floor the policy stops visiting actions whose q then never changes). Still tabular: it
  separates sampling noise from function approximation.

``--network`` runs ``pg``, ``neurd-onpolicy`` and ``neurd`` full width with a network in place of the table
(:func:`run_network_rule`): function approximation without sampling; and ``neurd-sampled`` with both, a
policy network and a q network fitted to sampled returns: what a trainer would run.

    OMP_NUM_THREADS=1 python benchmarks/selfplay_dynamics.py [--game leduc_poker] [--iterations 1000]
        [--rules cfr+ pg:5 neurd-onpolicy:10 neurd:10 neurd-sampled:2] [--reports 10]
        [--games 4096] [--q-step 1] [--logit-bound 4] [--seed 0] [--average linear]
    OMP_NUM_THREADS=1 python benchmarks/selfplay_dynamics.py --network [--optimizer adam] [--lr 3e-3] [--logit-bound 2]
        [--rules neurd-sampled --games 256 --q-lr 1e-3 --q-updates 2 --q-correction]

Needs ``open_spiel`` (``pip install 'rl-gpu[games]'``). Results and the conclusion: benchmarks/learning.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass

import torch
from torch import Tensor

RULES = ("cfr+", "pg", "neurd-onpolicy", "neurd", "neurd-sampled")
DEFAULT_ETA = {"pg": 5.0, "neurd-onpolicy": 10.0, "neurd": 10.0, "neurd-sampled": 2.0}
MAX_ITERATIONS = 1_000_000
MAX_NODES = 200_000
"""Largest tree built (Leduc has 9,457 nodes); a larger game is refused while its tree is being walked."""

TERMINAL, CHANCE, DECISION = 0, 1, 2


@dataclass(frozen=True)
class Evaluation:
    """One exact evaluation of a policy over the tree. S = information states, A = actions."""

    q: Tensor
    """[S, A] counterfactual action values for the player acting at each information state (0 off the legal
    actions)."""
    own_reach: Tensor
    """[S] the acting player's own probability of reaching each information state."""
    value: float
    """Seat 0's expected return."""


class GameTree:
    """The whole tree of a two-player zero-sum OpenSpiel game with perfect recall, as flat tensors.

    Nodes are numbered so that every parent comes before its children; ``levels[d]`` lists the nodes at depth
    d. A policy is a ``[S, A]`` float64 table in the row order of OpenSpiel's ``TabularPolicy(game)``.
    """

    def __init__(self, game, max_nodes: int = MAX_NODES) -> None:
        from open_spiel.python import policy as policy_lib

        self.game = game
        parent, depth, kind, player, info, action, chance, utility = ([] for _ in range(8))
        stack = [(game.new_initial_state(), -1, 0, -1, 1.0)]
        while stack:
            state, up, d, a, p = stack.pop()
            index = len(parent)
            if index >= max_nodes:
                raise ValueError(f"the game tree has more than {max_nodes:,} nodes")
            parent.append(up), depth.append(d), action.append(a), chance.append(p)
            if state.is_terminal():
                kind.append(TERMINAL), player.append(-1), info.append(None), utility.append(state.returns()[0])
                continue
            utility.append(0.0)
            if state.is_chance_node():
                kind.append(CHANCE), player.append(-1), info.append(None)
                stack.extend((state.child(o), index, d + 1, o, q) for o, q in state.chance_outcomes())
            else:
                kind.append(DECISION), player.append(state.current_player())
                info.append(state.information_state_string())
                stack.extend((state.child(o), index, d + 1, o, 1.0) for o in state.legal_actions())
        self.parent = torch.tensor(parent)
        self.kind = torch.tensor(kind)
        self.player = torch.tensor(player)
        # The table's constructor walks the game too: only once the walk above stayed within the cap.
        self.table = policy_lib.TabularPolicy(game)
        self.mask = torch.as_tensor(self.table.legal_actions_mask).bool()
        self.info = torch.tensor([-1 if key is None else self.table.state_lookup[key] for key in info])
        self.action = torch.tensor(action)
        self.chance = torch.tensor(chance, dtype=torch.float64)
        self.utility = torch.tensor(utility, dtype=torch.float64)
        depth_t = torch.tensor(depth)
        self.levels = [torch.nonzero(depth_t == d)[:, 0] for d in range(int(depth_t.max()) + 1)]
        up = self.parent.clamp(min=0)
        # Per node: how its parent moved to it (decision of whom, at which information state, which action).
        self.by_decision = (self.parent >= 0) & (self.kind[up] == DECISION)
        self.mover = torch.where(self.by_decision, self.player[up], 0)
        self.mover_info = torch.where(self.by_decision, self.info[up], 0)
        self.mover_action = torch.where(self.by_decision, self.action, 0)
        self.decisions = torch.nonzero(self.kind == DECISION)[:, 0]
        self.moves = torch.nonzero(self.by_decision)[:, 0]  # nodes a player's action leads to
        self.move_sign = 1.0 - 2.0 * self.mover[self.moves].double()  # seat 0's value -> the mover's
        width = max(int(torch.bincount(self.parent[1:]).max()), 1)
        self.children = torch.full((len(parent), width), -1, dtype=torch.long)
        order = torch.argsort(self.parent[1:], stable=True) + 1
        slot = torch.arange(len(order)) - torch.searchsorted(self.parent[order], self.parent[order])
        self.children[self.parent[order], slot] = order

    @property
    def num_nodes(self) -> int:
        return len(self.parent)

    def uniform(self) -> Tensor:
        return self.mask.double() / self.mask.sum(1, keepdim=True)

    def evaluate(self, probs: Tensor) -> Evaluation:
        """Exact counterfactual values of ``probs`` ([S, A]) at every information state."""
        n = self.num_nodes
        # reach[:, 0], reach[:, 1]: each seat's own product of action probabilities; reach[:, 2]: chance's.
        reach = torch.ones(n, 3, dtype=torch.float64)
        step = torch.where(self.by_decision, probs[self.mover_info, self.mover_action], self.chance)
        column = torch.where(self.by_decision, self.mover, 2)
        for nodes in self.levels[1:]:
            reach[nodes] = reach[self.parent[nodes]]
            reach[nodes, column[nodes]] *= step[nodes]
        value = self.utility.clone()  # seat 0's expected return from each node on
        for upper, lower in zip(reversed(self.levels[:-1]), reversed(self.levels[1:])):
            value[upper[self.kind[upper] != TERMINAL]] = 0.0
            value.index_add_(0, self.parent[lower], step[lower] * value[lower])
        moves = self.moves
        up, seat = self.parent[moves], self.mover[moves]
        others = reach[up, 1 - seat] * reach[up, 2]
        q = torch.zeros_like(probs)
        q.index_put_((self.mover_info[moves], self.mover_action[moves]), others * self.move_sign * value[moves],
                     accumulate=True)
        own = torch.zeros(probs.shape[0], dtype=torch.float64)
        own[self.info[self.decisions]] = reach[self.decisions, self.player[self.decisions]]
        return Evaluation(q, own, float(value[0]))

    def sample(self, probs: Tensor, games: int, generator: torch.Generator) -> tuple[Tensor, ...]:
        """Play ``games`` games of ``probs`` against itself from the root: ``(info, action, own_reach, ret)``,
        one entry per decision taken (K of them): the information state, the action, the acting player's own
        reach of that information state and the return that player got at the end of the game."""
        node = torch.zeros(games, dtype=torch.long)
        own = torch.ones(games, 2, dtype=torch.float64)
        visits = []
        while True:
            live = self.kind[node] != TERMINAL
            if not live.any():
                break
            kids = self.children[node].clamp(min=0)  # [G, C]
            weight = torch.where(self.by_decision[kids], probs[self.mover_info[kids], self.mover_action[kids]],
                                 self.chance[kids])
            weight = torch.where((self.children[node] >= 0) & live[:, None], weight, 0.0)
            weight[:, 0] += (~live).double()  # finished games stay where they are
            pick = torch.multinomial(weight, 1, generator=generator)[:, 0]
            nxt = kids.gather(1, pick[:, None])[:, 0]
            rows = torch.nonzero(live & (self.kind[node] == DECISION))[:, 0]
            seat = self.player[node[rows]]
            visits.append((rows, self.info[node[rows]], self.mover_action[nxt[rows]], own[rows, seat].clone(), seat))
            own[rows, seat] *= weight[rows].gather(1, pick[rows, None])[:, 0]
            node = torch.where(live, nxt, node)
        rows, info, action, reach, seat = (torch.cat(parts) for parts in zip(*visits))
        utility = self.utility[node[rows]]
        return info, action, reach, torch.where(seat == 0, utility, -utility)

    def exploitability(self, probs: Tensor) -> float:
        from open_spiel.python.algorithms import exploitability

        self.table.action_probability_array[:] = probs.numpy()
        return float(exploitability.exploitability(self.game, self.table))


def normalized(weights: Tensor, mask: Tensor) -> Tensor:
    """Rows of ``weights`` scaled to sum to 1; uniform over the legal actions where a row sums to 0."""
    total = weights.sum(1, keepdim=True)
    uniform = mask.double() / mask.sum(1, keepdim=True)
    return torch.where(total > 0, weights / total.clamp(min=1e-300), uniform)


def advantages(q: Tensor, probs: Tensor, mask: Tensor) -> Tensor:
    """``A(I, a) = q(I, a) - sum_b pi(b | I) q(I, b)``, 0 off the legal actions; every argument ``[rows, A]``."""
    return (q - (probs * q).sum(1, keepdim=True)) * mask


@dataclass(frozen=True)
class Sampling:
    """Settings of ``neurd-sampled``, and the averaging of every rule."""

    games: int = 4096
    q_step: float = 1.0
    logit_bound: float = 4.0
    seed: int = 0
    linear_average: bool = True
    q_updates: int = 2
    """--network: Adam steps of the q network per batch"""
    q_lr: float = 1e-3
    """--network: the q network's learning rate"""
    q_correction: bool = False
    """--network: correct the q network by each sampled return (:func:`corrected_advantage`)"""


def run_rule(tree: GameTree, rule: str, eta: float, iterations: int, report_at: set[int],
             sampling: Sampling = Sampling()):
    """Yield ``(iteration, decisions sampled so far, last-iterate exploitability, average exploitability)`` at
    each of ``report_at`` (decisions: 0 for the full-width rules)."""
    mask = tree.mask
    logits = torch.zeros(mask.shape, dtype=torch.float64)
    regrets = torch.zeros_like(logits)
    average = torch.zeros_like(logits)
    q_table = torch.zeros_like(logits)
    generator = torch.Generator().manual_seed(sampling.seed)
    decisions = 0
    for t in range(1, iterations + 1):
        if rule == "cfr+":
            probs = normalized(regrets * mask, mask)
        else:
            probs = torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=1)
        ev = tree.evaluate(probs)
        own = ev.own_reach[:, None]
        average += (t if sampling.linear_average else 1.0) * own * probs
        if rule == "neurd-sampled":
            info, action, reach, ret = tree.sample(probs, sampling.games, generator)
            decisions += len(info)
            total, count = torch.zeros_like(logits), torch.zeros_like(logits)
            total.index_put_((info, action), ret, accumulate=True)
            count.index_put_((info, action), torch.ones_like(ret), accumulate=True)
            q_table = torch.where(count > 0, q_table + sampling.q_step * (total / count.clamp(min=1) - q_table),
                                  q_table)
            # E[sum over visits of I of 1 / own(I)] / games = the reach of I by chance and opponent.
            weight = torch.zeros(mask.shape[0], dtype=torch.float64).index_add_(0, info, 1.0 / reach)
            advantage = advantages(q_table, probs, mask)
            logits = logits + eta * (weight / sampling.games)[:, None] * advantage
        else:
            advantage = advantages(ev.q, probs, mask)
            if rule == "cfr+":
                regrets = (regrets + advantage).clamp(min=0.0)
            else:
                weight = {"pg": own * probs, "neurd-onpolicy": own, "neurd": torch.ones_like(own)}[rule]
                logits = logits + eta * weight * advantage
        if rule != "cfr+":
            # Softmax is unchanged by a per-row shift; keep the largest legal logit at 0 against drift.
            logits = logits - logits.masked_fill(~mask, float("-inf")).amax(1, keepdim=True)
            if rule == "neurd-sampled":
                logits = logits.clamp(min=-sampling.logit_bound)
            logits = logits.masked_fill(~mask, 0.0)
        if t in report_at:
            yield t, decisions, tree.exploitability(probs), tree.exploitability(normalized(average, mask))


NETWORK_RULES = ("pg", "neurd-onpolicy", "neurd", "neurd-sampled")


def mlp(inputs: int, outputs: int) -> torch.nn.Module:
    """The library's default actor: 64-64 tanh."""
    return torch.nn.Sequential(torch.nn.Linear(inputs, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                               torch.nn.Tanh(), torch.nn.Linear(64, outputs))


def corrected_advantage(q: Tensor, pi: Tensor, mask: Tensor, info: Tensor, action: Tensor, reach: Tensor,
                        ret: Tensor) -> Tensor:
    """``[S, A]``: sum over the K sampled visits of each information state of ``A~(I_k, .) / own(I_k)``.

    ``q~(I_k, b) = q(I_k, b) + 1[b = a_k] (G_k - q(I_k, a_k)) / pi(a_k | I_k)`` corrects the q network's
    value of the action played by the return that followed (VR-MCCFR's baseline-corrected estimate): its
    expectation over the action is the true action value whatever the network's error, which only changes the
    variance. ``A~ = q~ - sum_b pi(b) q~(., b)``. Shapes: q, pi, mask ``[S, A]``; info, action, reach, ret
    ``[K]``."""
    rows = torch.arange(len(info))
    visit_q = q[info].clone()
    visit_q[rows, action] += (ret - visit_q[rows, action]) / pi[info, action]
    visit_advantage = advantages(visit_q, pi[info], mask[info])
    return torch.zeros_like(q).index_add_(0, info, visit_advantage / reach[:, None])


def run_network_rule(tree: GameTree, rule: str, iterations: int, report_at: set[int], lr: float,
                     sampling: Sampling = Sampling(), optimizer_name: str = "adam"):
    """``run_rule`` with the table of logits replaced by a network (:func:`mlp`) read out at every information
    state's tensor, one Adam step (``lr``) per iteration on the loss
    ``-sum weight(I) x A(I, a) x (logit(I, a) - sum_b pi(b | I) logit(I, b))``, whose gradient moves each
    logit as the rule moves the table (Adam sets the step's scale, so the rule's step size does not apply);
    ``optimizer_name="sgd"``: plain gradient steps of ``lr``, which keep the rule's step proportional to the
    advantages, as the table's is.
    NeuRD's rules stop pushing a centred logit beyond ``sampling.logit_bound`` (NeuRD's threshold).

    ``neurd-sampled`` is what a trainer would run: ``sampling.games`` self-play games per iteration, q(I, a)
    from a second network (:func:`mlp`) fitted to the sampled returns of the actions played
    (``sampling.q_updates`` Adam steps at ``sampling.q_lr`` on the squared error per iteration), and
    weight(I) = sum over the batch's visits of I of 1 / own(I), divided by the number of games (so that its
    expectation is ``neurd``'s weight of 1, as in the tabular rule); with ``sampling.q_correction``, each visit's
    advantage from :func:`corrected_advantage` instead. The average policy is still taken exactly
    over the tree, as for every rule, so that it measures the iterates, not an estimate of their average."""
    mask = tree.mask
    obs = torch.tensor([state.information_state_tensor() for state in tree.table.states], dtype=torch.float32)
    torch.manual_seed(sampling.seed)
    net = mlp(obs.shape[1], mask.shape[1])
    optimizer = (torch.optim.SGD if optimizer_name == "sgd" else torch.optim.Adam)(net.parameters(), lr=lr)
    if rule == "neurd-sampled":
        q_net = mlp(obs.shape[1], mask.shape[1])
        q_optimizer = torch.optim.Adam(q_net.parameters(), lr=sampling.q_lr)
        generator = torch.Generator().manual_seed(sampling.seed)
    average = torch.zeros(mask.shape, dtype=torch.float64)
    decisions = 0
    for t in range(1, iterations + 1):
        logits = net(obs).double().masked_fill(~mask, float("-inf"))
        probs = torch.softmax(logits, dim=1)
        pi = probs.detach()
        ev = tree.evaluate(pi)
        own = ev.own_reach[:, None]
        average += (t if sampling.linear_average else 1.0) * own * pi
        if rule == "neurd-sampled":
            info, action, reach, ret = tree.sample(pi, sampling.games, generator)
            decisions += len(info)
            inputs, target = obs[info], ret.float()
            for _ in range(sampling.q_updates):
                q_loss = (q_net(inputs).gather(1, action[:, None])[:, 0] - target).square().mean()
                q_optimizer.zero_grad()
                q_loss.backward()
                q_optimizer.step()
            with torch.no_grad():
                q = q_net(obs).double()
            if sampling.q_correction:
                weight = torch.ones_like(own)
                advantage = corrected_advantage(q, pi, mask, info, action, reach, ret) / sampling.games
            else:
                weight = torch.zeros(mask.shape[0], dtype=torch.float64).index_add_(0, info, 1.0 / reach)
                weight = (weight / sampling.games)[:, None]
                advantage = advantages(q, pi, mask)
        else:
            weight = torch.ones_like(own) if rule == "neurd" else own
            advantage = advantages(ev.q, pi, mask)
        centred = (logits - (pi * logits.masked_fill(~mask, 0.0)).sum(1, keepdim=True))
        centred = centred.masked_fill(~mask, 0.0)
        if rule == "pg":
            weight = weight * pi
        else:
            c = centred.detach()
            beyond = ((c > sampling.logit_bound) & (advantage > 0)) | ((c < -sampling.logit_bound) & (advantage < 0))
            advantage = advantage.masked_fill(beyond, 0.0)
        loss = -(weight * advantage * centred).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if t in report_at:
            yield t, decisions, tree.exploitability(pi), tree.exploitability(normalized(average, mask))


def parse_rule(text: str) -> tuple[str, float]:
    name, _, eta = text.partition(":")
    if name not in RULES:
        raise argparse.ArgumentTypeError(f"unknown rule {name!r}; known: {', '.join(RULES)}")
    if name == "cfr+":
        if eta:
            raise argparse.ArgumentTypeError("cfr+ takes no step size")
        return name, 0.0
    try:
        value = float(eta) if eta else DEFAULT_ETA[name]
    except ValueError:
        raise argparse.ArgumentTypeError(f"step size of {name} must be a number, got {eta!r}") from None
    if not 0.0 < value <= 1e6:
        raise argparse.ArgumentTypeError(f"step size of {name} must be in (0, 1e6], got {eta}")
    return name, value


def bounded_float(low: float, high: float):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not low < value <= high:
            raise argparse.ArgumentTypeError(f"must be in ({low:g}, {high:g}], got {text}")
        return value
    return parse


def bounded_int(low: int, high: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value
    return parse


def load_game_quietly(pyspiel, name: str):
    """``pyspiel.load_game(name)`` with OpenSpiel's own report of a bad name (its C++ side writes the list of
    every game to file descriptor 2) kept off the terminal; the ``SpielError`` still says what was wrong."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        return pyspiel.load_game(name)
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="leduc_poker",
                        help="an OpenSpiel two-player zero-sum game with perfect recall (leduc_poker, kuhn_poker)")
    parser.add_argument("--iterations", type=bounded_int(1, MAX_ITERATIONS), default=1000)
    parser.add_argument("--rules", nargs="+", type=parse_rule, default=None,
                        help="RULE or RULE:ETA (step size); rules: " + ", ".join(RULES) + " (default: all of them; "
                             "with --network: " + ", ".join(NETWORK_RULES) + ")")
    parser.add_argument("--reports", type=bounded_int(1, 1000), default=10,
                        help="how many evenly spaced iterations to report")
    parser.add_argument("--games", type=bounded_int(1, 1_000_000), default=Sampling.games,
                        help="neurd-sampled: self-play games per iteration")
    parser.add_argument("--q-step", type=bounded_float(0.0, 1.0), default=Sampling.q_step,
                        help="neurd-sampled: step of the q table towards each batch's mean return")
    parser.add_argument("--logit-bound", type=bounded_float(0.0, 100.0), default=Sampling.logit_bound,
                        help="neurd-sampled: no logit below the largest by more than this")
    parser.add_argument("--seed", type=bounded_int(0, 2**63 - 1), default=Sampling.seed)
    parser.add_argument("--average", choices=("linear", "uniform"), default="linear",
                        help="weight of iterate t in the average policy: t (CFR+'s) or 1, times the own reach")
    parser.add_argument("--network", action="store_true",
                        help="the policy is a 64-64 tanh MLP over information state tensors, one Adam step per "
                             "iteration (rules " + ", ".join(NETWORK_RULES) + "; --logit-bound is NeuRD's threshold)")
    parser.add_argument("--optimizer", choices=("adam", "sgd"), default="adam",
                        help="--network: the policy network's optimiser")
    parser.add_argument("--lr", type=bounded_float(0.0, 1.0), default=3e-3,
                        help="--network: the policy network's learning rate")
    parser.add_argument("--q-lr", type=bounded_float(0.0, 1.0), default=None,
                        help=f"--network neurd-sampled: the q network's Adam learning rate (default {Sampling.q_lr:g})")
    parser.add_argument("--q-updates", type=bounded_int(1, 1000), default=None,
                        help="--network neurd-sampled: Adam steps of the q network per batch of games "
                             f"(default {Sampling.q_updates})")
    parser.add_argument("--q-correction", action="store_true",
                        help="--network neurd-sampled: the q network's value of each action played corrected by "
                             "the return that followed (importance-weighted: unbiased whatever the network's error)")
    args = parser.parse_args(argv)
    if args.rules is None:
        args.rules = [parse_rule(rule) for rule in (NETWORK_RULES if args.network else RULES)]
    if args.network and any(rule not in NETWORK_RULES for rule, _ in args.rules):
        parser.error(f"--network runs the rules {', '.join(NETWORK_RULES)} only; got "
                     f"{', '.join(rule for rule, _ in args.rules)}")
    if args.optimizer != "adam" and not args.network:
        parser.error("--optimizer applies to --network only")
    network_only = [flag for flag, given in (("--q-lr", args.q_lr is not None),
                                             ("--q-updates", args.q_updates is not None),
                                             ("--q-correction", args.q_correction)) if given]
    if network_only and not (args.network and any(rule == "neurd-sampled" for rule, _ in args.rules)):
        verb = "applies" if len(network_only) == 1 else "apply"
        parser.error(f"{', '.join(network_only)} {verb} to --network --rules neurd-sampled only")
    sampling = Sampling(args.games, args.q_step, args.logit_bound, args.seed, args.average == "linear",
                        args.q_updates or Sampling.q_updates, args.q_lr or Sampling.q_lr, args.q_correction)
    try:
        import pyspiel
    except ImportError as e:
        print(f"error: this benchmark needs open_spiel ({e}): pip install 'rl-gpu[games]'", file=sys.stderr)
        return 2
    try:
        game = load_game_quietly(pyspiel, args.game)
    except pyspiel.SpielError as e:
        reason = (str(e).splitlines() or ["refused"])[0].split(" Available games are")[0]
        print(f"error: OpenSpiel has no game {args.game!r} ({reason}); e.g. leduc_poker, kuhn_poker", file=sys.stderr)
        return 2
    info = game.get_type()
    if (game.num_players() != 2 or info.utility != pyspiel.GameType.Utility.ZERO_SUM
            or info.information != pyspiel.GameType.Information.IMPERFECT_INFORMATION
            or not info.provides_information_state_string):
        print(f"error: {args.game} is not a two-player zero-sum imperfect-information game with information "
              "states", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    start = time.perf_counter()
    try:
        tree = GameTree(game)
    except ValueError as e:
        print(f"error: {args.game} is too large to run full width here ({e})", file=sys.stderr)
        return 2
    print(f"{args.game}: {tree.num_nodes} nodes, {tree.mask.shape[0]} information states "
          f"(tree built in {time.perf_counter() - start:.1f} s); uniform random: "
          f"{tree.exploitability(tree.uniform()):.4f}")
    steps = max(1, args.iterations // args.reports)
    report_at = set(range(steps, args.iterations + 1, steps)) | {args.iterations}
    print("| rule | eta | iteration | decisions sampled | last iterate | average | seconds |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for rule, eta in args.rules:
        start = time.perf_counter()
        if args.network:
            runs = run_network_rule(tree, rule, args.iterations, report_at, args.lr, sampling, args.optimizer)
        else:
            runs = run_rule(tree, rule, eta, args.iterations, report_at, sampling)
        for t, decisions, last, average in runs:
            optimizer_text = "SGD" if args.optimizer == "sgd" else "Adam"
            eta_text = f"{optimizer_text} {args.lr:g}" if args.network else "-" if rule == "cfr+" else f"{eta:g}"
            sampled = f"{decisions:,}" if rule == "neurd-sampled" else "full width"
            print(f"| {rule} | {eta_text} | {t} | {sampled} | {last:.4f} | {average:.4f} | "
                  f"{time.perf_counter() - start:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
