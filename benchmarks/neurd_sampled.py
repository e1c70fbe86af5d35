"""NeuRD on Leduc from sampled counterfactual values: how far sampling takes ``--algo neurd``'s network.

The trainer's NeuRD (:mod:`rl_gpu.algos.neurd`) takes its step on the exact counterfactual values of the whole
tree. Here the same algorithm object (same networks, step, average and average-policy fit) takes it on an
*external-sampling* estimate (Lanctot et al., 2009, as Deep CFR samples): per iteration ``--deals`` deals are
drawn uniformly with replacement, and one action at every decision node of the opponent from the current
policy; the seat whose values are estimated (each seat in turn) still has all its own actions followed. The
estimate is unbiased: a sampled deal counts ``(times drawn) / deals`` where the exact value counts 1/120, and a
sampled opponent action counts 1 where the exact value counts its probability
(:func:`external_sample`, checked against the exact values in tests/interop/test_neurd_sampled.py).
Exploitability (OpenSpiel's, of the average table and of the average-policy network) at ``--reports`` evenly
spaced iterations.

    OMP_NUM_THREADS=1 python benchmarks/neurd_sampled.py [--deals 32] [--iterations 15000] [--reports 10]
        [--lr 0.01] [--seed 0]

Needs ``open_spiel`` (``pip install 'rl-gpu[games]'``). Results: benchmarks/learning.md.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from torch import Tensor

from rl_gpu.algos.base import Setup
from rl_gpu.algos.neurd import NeuRD, NeuRDConfig
from rl_gpu.envs.game_tree import GameTree
from rl_gpu.envs.leduc import LeducHoldem
from selfplay_dynamics import bounded_float, bounded_int


def external_sample(tree: GameTree, probs: Tensor, deals: int, generator: torch.Generator) -> Tensor:
    """``[S, A]`` float64: an unbiased estimate of ``tree.evaluate(probs).q`` from ``deals`` starts drawn uniformly
    with replacement (uniform starts, as Leduc's) and one action drawn from ``probs`` at every decision node,
    each seat's values with its own actions enumerated and the other seat's sampled."""
    starts, n = tree.levels[0], tree.num_nodes
    weight = torch.bincount(torch.randint(0, starts.numel(), (deals,), generator=generator),
                            minlength=starts.numel()).double() / deals
    at_node = probs[tree.info.clamp(min=0)] + tree.terminal[:, None].double()  # terminal rows: any valid weights
    pick = torch.multinomial(at_node, 1, generator=generator)[:, 0]
    up = tree.parent.clamp(min=0)
    own_step = probs[tree.mover_info, tree.action.clamp(min=0)]
    sampled_step = (tree.action == pick[up]).double()
    q = torch.zeros_like(probs)
    for seat in (0, 1):
        mine = tree.mover == seat
        step = torch.where(mine, own_step, sampled_step)
        step[starts] = weight
        others = torch.ones(n, dtype=torch.float64)  # the opponent's sampled choices times the deal's weight
        others[starts] = weight
        for level in tree.levels[1:]:
            others[level] = others[tree.parent[level]] * torch.where(mine[level], 1.0, step[level])
        after = torch.zeros(n, dtype=torch.float64)  # this seat's reward into the node plus its value from there
        for level in reversed(tree.levels[1:]):
            after[level] += tree.edge_reward[level, seat]
            after.index_add_(0, tree.parent[level], step[level] * after[level])
        moves = tree.moves[mine[tree.moves]]
        q.index_put_((tree.mover_info[moves], tree.action[moves]), others[up[moves]] * after[moves],
                     accumulate=True)
    return q


def exploitability_of(tree: GameTree):
    """``measure(probs [S, A]) -> chips``: OpenSpiel's exploitability of the tabular policy ``probs`` of Leduc."""
    import pyspiel
    from open_spiel.python import policy as policy_lib
    from open_spiel.python.algorithms import exploitability

    game = pyspiel.load_game("leduc_poker")
    table = policy_lib.TabularPolicy(game)
    row = {tuple(obs.tolist()): i for i, obs in enumerate(tree.obs)}
    order = [row[tuple(state.information_state_tensor())] for state in table.states]

    def measure(probs: Tensor) -> float:
        table.action_probability_array[:] = probs[order].numpy()
        return float(exploitability.exploitability(game, table))
    return measure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deals", type=bounded_int(1, 1_000_000), default=32, help="deals drawn per iteration")
    parser.add_argument("--iterations", type=bounded_int(1, 1_000_000), default=15_000)
    parser.add_argument("--reports", type=bounded_int(1, 1000), default=10, help="evenly spaced reports")
    parser.add_argument("--lr", type=bounded_float(0.0, 1.0), default=0.01, help="NeuRD's plain gradient step")
    parser.add_argument("--seed", type=bounded_int(0, 2**63 - 1), default=0)
    args = parser.parse_args(argv)
    try:
        import pyspiel  # noqa: F401
    except ImportError as e:
        print(f"error: this benchmark needs open_spiel ({e}): pip install 'rl-gpu[games]'", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    algo = NeuRD.from_setup(Setup(env=LeducHoldem(1), seed=args.seed, learning_rate=args.lr), NeuRDConfig())
    tree, measure = algo.tree, exploitability_of(algo.tree)
    generator = torch.Generator().manual_seed(args.seed)
    every = max(1, args.iterations // args.reports)
    print(f"Leduc, NeuRD from external sampling: {args.deals} deals per iteration, lr {args.lr:g}, seed {args.seed}; "
          f"uniform random {measure(tree.uniform()):.4f} chips\n"
          "| iteration | seconds | average policy (table) | average-policy network |\n| ---: | ---: | ---: | ---: |")
    start = time.perf_counter()
    for t in range(1, args.iterations + 1):
        raw, pi = algo.logits_and_policy()
        # The average's weights, the own reaches, are products of pi alone: no values, nothing to sample.
        algo.learn(raw, pi, external_sample(tree, pi, args.deals, generator), tree.own_reach(pi))
        if t % every == 0 or t == args.iterations:
            with torch.no_grad():
                network = torch.softmax(algo.policy.actor(tree.obs).double().masked_fill(~tree.mask, float("-inf")),
                                        dim=1)
            print(f"| {t} | {time.perf_counter() - start:.0f} | {measure(algo.average_target()):.4f} | "
                  f"{measure(network):.4f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
