"""An iteration's typed result: its parts say how each statistic is combined over processes and logged, a plain
dictionary from an algorithm of one's own is split into the same parts, and a population's ``[K]`` result gives
each member its own entries."""

import pytest
import torch

from rl_gpu.algos.iteration import COLLECTION_METRICS, Collected, Iteration


def result(scale: float = 1.0) -> Iteration:
    collected = Collected(*(torch.tensor(float(i) * scale) for i in range(1, 6)))
    return Iteration(collected, torch.tensor(0.5), {"loss": torch.tensor(2.0)}, {"team_return": torch.tensor(7.0)})


def test_an_iteration_is_a_mapping_of_every_statistic_by_its_record_name():
    r = result()
    assert list(r) == ["loss", "learning_rate", "team_return", *COLLECTION_METRICS]
    assert r["transitions"].item() == 5.0 and r["loss"].item() == 2.0 and len(r) == 8


def test_the_layout_says_what_adds_up_and_what_is_weighted_by_episodes():
    layout = result().layout()
    kinds = {n: (s, e) for n, s, e in zip(layout.names, layout.summed, layout.per_episode)}
    assert kinds["episodes"] == (True, False) and kinds["transitions"] == (True, False)
    assert kinds["episode_return"] == (False, True) and kinds["win_rate"] == (False, True)
    assert kinds["team_return"] == (False, True)
    assert kinds["loss"] == (False, False) and kinds["learning_rate"] == (False, False)
    assert result(2.0).stacked(layout).tolist() == [2.0, 0.5, 7.0, 2.0, 4.0, 6.0, 8.0, 10.0]


def test_a_plain_dictionary_is_split_into_the_parts():
    r = result()
    plain = {name: r[name] for name in r}
    back = Iteration.of(plain, per_episode=("team_return",))
    assert back.layout() == r.layout()
    assert Iteration.of(r) is r
    with pytest.raises(TypeError, match="missing \\['transitions'\\]"):
        Iteration.of({k: v for k, v in plain.items() if k != "transitions"})
    with pytest.raises(TypeError, match="learning_rate"):
        Iteration.of({k: v for k, v in plain.items() if k != "learning_rate"})


def test_names_used_twice_and_metrics_that_change_are_refused():
    with pytest.raises(ValueError, match="used twice"):
        Iteration(result().collected, torch.tensor(0.1), {"episodes": torch.tensor(1.0)})
    with pytest.raises(ValueError, match="same every iteration"):
        result().adding(learner={"extra": torch.tensor(1.0)}).stacked(result().layout())


def test_a_member_of_a_population_gets_its_own_entries():
    k = torch.arange(3.0)
    pop = Iteration(Collected(*(k + i for i in range(5))), k * 0.1, {"loss": k * 10}, {"team_return": -k})
    one = pop.member(2)
    assert one.collected.episodes.item() == 2.0 and one.collected.transitions.item() == 6.0
    assert one["loss"].item() == 20.0 and one["team_return"].item() == -2.0
    assert one.learning_rate.item() == pytest.approx(0.2)
