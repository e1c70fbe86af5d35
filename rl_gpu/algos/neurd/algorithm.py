"""NeuRD (Neural Replicator Dynamics; Hennes et al., 2020) as an :class:`~rl_gpu.algos.base.Algorithm`: a policy
network plays both seats of a two-player zero-sum game against itself, full width.

Shape legend: S = information states, O = observation size, A = actions.

Each iteration evaluates the policy exactly over the whole game tree, every chance outcome and every action
sequence enumerated once through the environment's own transition (:class:`~rl_gpu.envs.game_tree.GameTree`),
instead of sampling games: with pi the network's policy at every information state I and q(I, a) the
counterfactual action values (:meth:`GameTree.evaluate`), the advantage is A(I, a) = q(I, a) - sum_b pi(b | I)
q(I, b), and one plain gradient step on

    loss = - sum_I sum_a A(I, a) (y(I, a) - sum_b pi(b | I) y(I, b)),   y the network's logits, pi held fixed,

moves each logit by the advantage itself: Hedge on counterfactual values, NeuRD's rule. Plain SGD, because Adam
would rescale the steps away from the advantages. NeuRD's threshold stops pushing a centred logit beyond
``logit_threshold``. The iterates do not settle (they cycle around an equilibrium); their average does. The
average policy is kept exactly, ``sum_t w_t own_reach_t(I) pi_t(. | I)`` normalised per information state, and
a second network, the one that is validated, saved and exported (:attr:`NeuRD.policy`), is fitted to it by
cross-entropy after every iteration, so that the policy read out of a network is what gets measured.

Sampled self-play (PPO's league, :mod:`rl_gpu.training.league`) needs no tree, so it runs on any two-player
environment; this runs on games small enough to enumerate, and gets much closer to an equilibrium there
(benchmarks/learning.md).
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from rl_gpu.algos.base import COLLECTION_METRICS, Collected, Iteration, PhaseTimer, Setup, no_phase
from rl_gpu.algos.neurd.config import NeuRDConfig
from rl_gpu.envs.base import TensorEnv
from rl_gpu.envs.game_tree import GameTree
from rl_gpu.nn.actor_critic import ActorCritic, policy_for_env
from rl_gpu.nn.cpu_kernels import use_cpu_kernels

STATS = ("policy_loss", "average_kl", "game_value")
"""``policy_loss``: the surrogate above; ``average_kl``: KL(average policy || average-policy network), mean over
information states, at the iteration's last fit step; ``game_value``: seat 0's expected return under the iterate."""


def normalized(weights: Tensor, mask: Tensor) -> Tensor:
    """Rows of ``weights`` (``[S, A]``) scaled to sum to 1; uniform over the legal actions where a row sums to 0."""
    total = weights.sum(1, keepdim=True)
    uniform = mask.double() / mask.sum(1, keepdim=True)
    return torch.where(total > 0, weights / total.clamp(min=1e-300), uniform)


class NeuRD:
    """Full-width NeuRD bound to a game tree.

    Args:
        tree: the game's whole tree (its information states are what the networks see).
        current: the iterate's network (its actor's logits; its critic is not used).
        average_policy: the network fitted to the average policy (its critic is not trained: NeuRD learns no
            value function, so the values it reports mean nothing).
        config: NeuRD hyper-parameters.
        learning_rate: the iterate's plain gradient step.
        anneal_lr: :meth:`set_progress` decays that step linearly to 0.
    """

    num_steps = 1
    resume_notes: tuple[str, ...] = ()

    def __init__(self, tree: GameTree, current: ActorCritic, average_policy: ActorCritic, config: NeuRDConfig,
                 learning_rate: float, anneal_lr: bool = False) -> None:
        self.tree = tree
        self.config = config
        self.current = use_cpu_kernels(current)  # on the CPU: their fast forms (the same parameters)
        self.average_policy = use_cpu_kernels(average_policy)
        self.lr = learning_rate
        self.anneal_lr = anneal_lr
        self.optimizer = torch.optim.SGD(current.actor.parameters(), lr=learning_rate)
        self.average_optimizer = torch.optim.Adam(average_policy.actor.parameters(), lr=config.average_lr)
        self.average = torch.zeros(tree.mask.shape, dtype=torch.float64, device=tree.mask.device)
        """``[S, A]``: the weighted sum of the iterates, :attr:`policy`'s target once normalised."""
        self.iteration = 0
        self.metric_names = (*STATS, "learning_rate", *COLLECTION_METRICS)
        self._terminals = tree.terminal.sum().double()
        self._transitions = torch.tensor(float(tree.num_transitions), device=self.average.device)
        self.describe_shape = (f"full width over {tree.num_nodes:,} nodes and {tree.obs.shape[0]:,} information "
                               "states")
        """What the run's first log line says it iterates over (instead of N environments x T steps)."""

    @classmethod
    def from_setup(cls, setup: Setup, config: NeuRDConfig) -> NeuRD:
        """The runner's constructor: the tree of ``setup.env``'s game and two networks sized for it. Raises
        ``ValueError`` (saying why) for an environment whose tree cannot be enumerated, or for settings that do
        not apply."""
        env = setup.env
        if not isinstance(env, TensorEnv):
            raise ValueError("--algo neurd enumerates a game through its tensor environment's transition; "
                             f"{type(env).__name__} is not one")
        if setup.normalize_obs:
            raise ValueError("--algo neurd reads information states as they are: drop --normalize-obs")
        if setup.num_steps is not None:
            raise ValueError("--num-steps does not apply to --algo neurd (an iteration evaluates the whole game "
                             "tree): drop it")
        try:
            tree = GameTree(env)
        except ValueError as e:
            raise ValueError(f"--algo neurd needs a two-player zero-sum game it can enumerate, with perfect "
                             f"recall (LeducHoldem-v0): {e}") from None
        current = policy_for_env(env.spec, setup.hidden_sizes).to(env.device)
        average_policy = policy_for_env(env.spec, setup.hidden_sizes).to(env.device)
        return cls(tree, current, average_policy, config, setup.learning_rate, setup.anneal_lr)

    @property
    def policy(self) -> nn.Module:
        return self.average_policy

    def initial_policy(self) -> nn.Module:
        """A frozen copy of the average-policy network as it is now."""
        return copy.deepcopy(self.average_policy).eval()

    def set_progress(self, fraction: float | Tensor) -> None:
        if self.anneal_lr:
            for group in self.optimizer.param_groups:
                group["lr"] = self.lr * (1.0 - float(fraction))

    def average_target(self) -> Tensor:
        """``[S, A]`` float64: the average policy so far (uniform before the first iteration)."""
        return normalized(self.average, self.tree.mask)

    def iterate(self, *, phase: PhaseTimer = no_phase) -> Iteration:
        """One iteration: evaluate the policy over the whole tree, take NeuRD's step, add the iterate to the
        average and fit the average-policy network to it."""
        tree = self.tree
        with phase("evaluate"):
            raw, pi = self.logits_and_policy()
            values = tree.evaluate(pi)
        with phase("update"):
            policy_loss, average_kl = self.learn(raw, pi, values.q, values.own_reach)
        lr = torch.tensor(self.optimizer.param_groups[0]["lr"], dtype=torch.float32, device=self.average.device)
        # Every terminal history is evaluated once per iteration, weighted by its probability.
        collected = Collected(episodes=self._terminals.float(), episode_return=values.value[0].float(),
                              episode_length=values.game_length.float(), win_rate=values.win_rate.float(),
                              transitions=self._transitions)
        return Iteration(collected, lr, {"policy_loss": policy_loss.float(), "average_kl": average_kl,
                                         "game_value": values.value[0].float()})

    def logits_and_policy(self) -> tuple[Tensor, Tensor]:
        """The iterate's logits at every information state (``[S, A]`` float64, differentiable) and its policy
        (``[S, A]``, detached)."""
        mask = self.tree.mask
        raw = self.current.actor(self.tree.obs).double()
        return raw, torch.softmax(raw.masked_fill(~mask, float("-inf")), dim=1).detach()

    def learn(self, raw: Tensor, pi: Tensor, q: Tensor, own_reach: Tensor) -> tuple[Tensor, Tensor]:
        """One NeuRD step from counterfactual values ``q`` (``[S, A]``: exact, or any unbiased estimate of them),
        then the iterate ``pi`` (weighted by ``own_reach`` ``[S]``) into the average and the average-policy
        network's fit; ``raw`` and ``pi`` as :meth:`logits_and_policy` returns them. Returns ``(policy loss,
        average KL)`` as 0-dim tensors."""
        mask, cfg = self.tree.mask, self.config
        self.iteration += 1
        weight = float(self.iteration) if cfg.average == "linear" else 1.0
        self.average += weight * own_reach[:, None] * pi
        advantage = (q - (pi * q).sum(1, keepdim=True)) * mask
        centred = ((raw - (pi * raw.masked_fill(~mask, 0.0)).sum(1, keepdim=True))).masked_fill(~mask, 0.0)
        held = centred.detach()
        beyond = (((held > cfg.logit_threshold) & (advantage > 0))
                  | ((held < -cfg.logit_threshold) & (advantage < 0)))
        policy_loss = -(advantage.masked_fill(beyond, 0.0) * centred).sum()
        self.optimizer.zero_grad(set_to_none=True)
        policy_loss.backward()
        self.optimizer.step()
        return policy_loss.detach(), self._fit_average()

    def _fit_average(self) -> Tensor:
        """``average_steps`` Adam steps of the average-policy network on the cross-entropy to the average policy;
        returns the KL divergence left (0-dim float32)."""
        mask = self.tree.mask
        target = self.average_target().float()
        entropy = -(target * target.clamp(min=1e-30).log()).sum(1).mean()
        for _ in range(self.config.average_steps):
            logits = self.average_policy.actor(self.tree.obs).masked_fill(~mask, float("-inf"))
            log_probs = torch.log_softmax(logits, dim=1).masked_fill(~mask, 0.0)
            cross_entropy = -(target * log_probs).sum(1).mean()
            self.average_optimizer.zero_grad(set_to_none=True)
            cross_entropy.backward()
            self.average_optimizer.step()
        return (cross_entropy - entropy).detach()

    def state_dict(self) -> dict:
        """Everything the next iteration depends on (full width draws no random numbers)."""
        return {"current": self.current.state_dict(), "average_policy": self.average_policy.state_dict(),
                "optimizer": self.optimizer.state_dict(), "average_optimizer": self.average_optimizer.state_dict(),
                "average": self.average.clone(), "iteration": self.iteration}

    def load_state_dict(self, state: dict) -> None:
        self.current.load_state_dict(state["current"])
        self.average_policy.load_state_dict(state["average_policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.average_optimizer.load_state_dict(state["average_optimizer"])
        if state["average"].shape != self.average.shape:
            raise ValueError(f"the checkpoint's average policy has shape {tuple(state['average'].shape)}, this "
                             f"game's information states need {tuple(self.average.shape)}")
        self.average.copy_(state["average"])
        self.iteration = int(state["iteration"])
