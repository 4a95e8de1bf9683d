import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hrl_tasks.search import (
    CONTINUE,
    STOP,
    ASHAScheduler,
    Exploit,
    FIFOScheduler,
    PBTScheduler,
    SearchError,
    TrialScheduler,
    bottom_and_top,
    choice,
    grid,
    loguniform,
    perturb,
    randint,
    rung_iterations,
    scheduler_from_state,
    uniform,
)


def test_fifo_never_stops_a_trial():
    fifo = FIFOScheduler()
    assert {fifo.on_result("t", i, v) for i, v in [(1, 0.0), (10**6, math.nan)]} == {CONTINUE}


@pytest.mark.parametrize(
    "grace, factor, max_t, rungs",
    [(1, 4, 100, (1, 4, 16, 64)), (2, 3, 54, (2, 6, 18, 54)), (5, 2, 5, (5,))],
)
def test_rungs_grow_by_the_reduction_factor_up_to_max_t(grace, factor, max_t, rungs):
    assert rung_iterations(grace, factor, max_t) == rungs
    assert ASHAScheduler(max_t, grace, factor).rungs == rungs


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(grace_period=0), "grace_period"),
        (dict(reduction_factor=1), "reduction_factor >= 2"),
        (dict(max_t=3, grace_period=4), "max_t >= grace_period"),
        (dict(mode="best"), "mode must be"),
    ],
)
def test_asha_names_bad_arguments(kwargs, message):
    with pytest.raises(SearchError, match=message):
        ASHAScheduler(**kwargs)


def brute_force_continues(earlier: list[float], value: float, factor: int, mode: str) -> bool:
    """Sort the rung's values best first; the trial continues if it is at least as good
    as the value in place max(1, n // factor)."""
    if math.isnan(value):
        return False
    worst = -math.inf if mode == "max" else math.inf  # where earlier NaNs rank
    values = sorted(
        [worst if math.isnan(v) else v for v in [*earlier, value]], reverse=mode == "max"
    )
    cut = values[max(1, len(values) // factor) - 1]
    return value >= cut if mode == "max" else value <= cut


@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_asha_stops_exactly_the_trials_below_the_cut_at_each_rung(data):
    num_trials = data.draw(st.integers(1, 10))
    grace, factor = data.draw(st.integers(1, 3)), data.draw(st.integers(2, 4))
    max_t = data.draw(st.integers(grace, 30))
    mode = data.draw(st.sampled_from(["max", "min"]))
    value = st.one_of(st.integers(0, 4).map(float), st.just(math.nan))  # ties and NaNs
    curves = [data.draw(st.lists(value, min_size=max_t, max_size=max_t)) for _ in range(num_trials)]
    asha = ASHAScheduler(max_t=max_t, grace_period=grace, reduction_factor=factor, mode=mode)
    rungs = rung_iterations(grace, factor, max_t)
    recorded = {rung: [] for rung in rungs}
    next_iteration = dict.fromkeys(range(num_trials), 1)
    while next_iteration:  # trials report in any interleaving, as they would on a cluster
        trial = data.draw(st.sampled_from(sorted(next_iteration)))
        iteration = next_iteration[trial]
        reported = curves[trial][iteration - 1]
        decision = asha.on_result(trial, iteration, reported)
        expected = CONTINUE
        if iteration in recorded:
            if not brute_force_continues(recorded[iteration], reported, factor, mode):
                expected = STOP
            recorded[iteration].append(reported)
        if iteration == max_t:
            expected = STOP
        assert decision == expected, (trial, iteration, reported, recorded)
        next_iteration[trial] += 1
        if decision == STOP:
            del next_iteration[trial]
    for rung in rungs:
        assert list(asha.results_at(rung).values()) == pytest.approx(recorded[rung], nan_ok=True)


def test_the_first_trial_at_a_rung_continues_and_a_nan_stops():
    asha = ASHAScheduler(max_t=10, grace_period=1, reduction_factor=2)
    assert asha.on_result("a", 1, -100.0) == CONTINUE
    assert asha.on_result("b", 1, math.nan) == STOP


def test_a_report_that_skips_rungs_is_judged_at_the_highest_one_reached():
    asha = ASHAScheduler(max_t=100, grace_period=1, reduction_factor=2)
    asha.on_result("a", 4, 5.0)
    asha.on_result("b", 5, 1.0)
    assert asha.results_at(4) == {"a": 5.0, "b": 1.0}
    assert asha.results_at(1) == {} and asha.results_at(2) == {}


SPACE = {
    "env": "CartPole-v1",
    "lr": loguniform(1e-4, 1e-1),
    "gamma": uniform(0.9, 0.999),
    "iters": randint(1, 30),
    "act": choice(["tanh", "relu", "elu"]),
    "clip": grid([0.1, 0.2]),
}
CONFIG = {"env": "CartPole-v1", "lr": 1e-3, "gamma": 0.95, "iters": 10, "act": "relu", "clip": 0.2}


def population(scores: dict, checkpointed=(), seed=0, interval=5, **kwargs) -> PBTScheduler:
    """A PBT population whose trials each reported once, before any perturbation step."""
    pbt = PBTScheduler(SPACE, perturbation_interval=interval, seed=seed, **kwargs)
    for trial, score in scores.items():
        pbt.on_trial_add(trial, CONFIG)
        pbt.on_result(trial, 1, score)
    for trial in checkpointed:
        pbt.on_checkpoint(trial)
    return pbt


@given(
    scores=st.lists(st.floats(-10, 10), min_size=2, max_size=12, unique=True),
    checkpointed=st.sets(st.integers(0, 11)),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=60, deadline=None)
def test_bottom_trials_exploit_only_top_trials_with_a_checkpoint(scores, checkpointed, seed):
    pbt = population(dict(enumerate(scores)), checkpointed & set(range(len(scores))), seed)
    ranked = sorted(range(len(scores)), key=scores.__getitem__)
    count = min(math.ceil(len(scores) * 0.25), len(scores) // 2)
    bottom, top = set(ranked[:count]), set(ranked[len(ranked) - count :])
    sources = top & checkpointed
    for trial, score in enumerate(scores):
        decision = pbt.on_result(trial, 5, score)
        if trial in bottom and sources:
            assert isinstance(decision, Exploit) and decision.source in sources
        else:
            assert decision == CONTINUE


def test_no_exploit_between_perturbation_steps():
    pbt = population({"low": 0.0, "high": 1.0}, checkpointed=["high"], interval=5)
    assert pbt.on_result("low", 4, 0.0) == CONTINUE
    assert isinstance(pbt.on_result("low", 5, 0.0), Exploit)
    assert pbt.on_result("low", 9, 0.0) == CONTINUE


def test_mode_min_makes_the_lowest_value_the_top():
    pbt = population({"a": 0.0, "b": 1.0}, checkpointed=["a", "b"], mode="min")
    assert pbt.on_result("a", 5, 0.0) == CONTINUE
    assert pbt.on_result("b", 5, 1.0) == Exploit("a", pbt.config_of("b"))


def test_the_exploited_config_is_the_sources_checkpoint_config_perturbed():
    pbt = population({"low": 0.0, "high": 1.0}, resample_probability=0.0)
    pbt.on_trial_add("high", dict(CONFIG, lr=0.01))
    pbt.on_result("high", 1, 1.0)
    pbt.on_checkpoint("high")
    decision = pbt.on_result("low", 5, 0.0)
    assert decision.source == "high" and pbt.config_of("low") == decision.config
    assert decision.config["lr"] == pytest.approx(0.008) or decision.config["lr"] == pytest.approx(
        0.012
    )
    assert decision.config["clip"] == CONFIG["clip"] and decision.config["env"] == CONFIG["env"]


def test_a_trial_that_exploited_is_no_source_until_it_saves_again():
    pbt = population({"a": 0.0, "b": 1.0, "c": 2.0, "d": 3.0}, checkpointed="abcd")
    assert pbt.on_result("a", 5, 0.0).source == "d"
    pbt.on_result("a", 6, 9.0)  # now the top trial, but its checkpoint was of its old self
    assert pbt.on_result("b", 5, 1.0) == CONTINUE
    pbt.on_checkpoint("a")
    assert pbt.on_result("b", 10, 1.0).source == "a"


def test_completed_trials_leave_the_population():
    pbt = population({"a": 0.0, "b": 1.0}, checkpointed=["b"])
    pbt.on_trial_complete("b")
    assert pbt.on_result("a", 5, 0.0) == CONTINUE


def test_pbt_is_deterministic_given_a_seed():
    def decisions(seed):
        scores = {f"t{i}": float(i % 5) for i in range(8)}
        pbt = population(scores, checkpointed=scores, seed=seed)
        return [pbt.on_result(t, step, s + step) for step in (5, 10, 15) for t, s in scores.items()]

    assert decisions(1) == decisions(1)


def test_pbt_names_bad_arguments_and_unknown_trials():
    for kwargs, message in [
        (dict(perturbation_interval=0), "perturbation_interval"),
        (dict(quantile_fraction=0.6), "quantile_fraction in \\[0, 0.5\\]"),
        (dict(resample_probability=1.5), "resample_probability in \\[0, 1\\]"),
    ]:
        with pytest.raises(SearchError, match=message):
            PBTScheduler(SPACE, **{"perturbation_interval": 5, **kwargs})
    with pytest.raises(SearchError, match="on_trial_add"):
        PBTScheduler(SPACE, 5).on_result("ghost", 5, 1.0)


@pytest.mark.parametrize(
    "count, fraction, expected",
    [(1, 0.25, 0), (2, 0.25, 1), (4, 0.25, 1), (5, 0.25, 2), (3, 0.5, 1), (8, 0.0, 0)],
)
def test_bottom_and_top_take_a_rounded_up_quantile_but_at_most_half(count, fraction, expected):
    scores = {f"t{i}": float(i) for i in range(count)}
    bottom, top = bottom_and_top(scores, fraction)
    assert bottom == [f"t{i}" for i in range(expected)]
    assert top == [f"t{i}" for i in range(count - expected, count)]


bounded = st.one_of(
    st.tuples(st.floats(-1e3, 1e3), st.floats(1e-3, 1e3)).map(lambda b: uniform(b[0], b[0] + b[1])),
    st.tuples(st.floats(1e-8, 1e2), st.floats(1.01, 1e4)).map(
        lambda b: loguniform(b[0], b[0] * b[1])
    ),
    st.tuples(st.integers(-50, 50), st.integers(1, 50)).map(lambda b: randint(b[0], b[0] + b[1])),
)


@given(bounded, st.integers(0, 2**32 - 1), st.floats(0, 1))
@settings(deadline=None)
def test_perturbations_stay_within_the_domains_bounds(domain, seed, resample_probability):
    rng = np.random.default_rng(seed)
    value = domain.sample(rng)
    for _ in range(10):
        value = perturb({"x": value}, {"x": domain}, rng, resample_probability)["x"]
        assert (
            domain.low <= value <= (domain.high - 1 if isinstance(domain, randint) else domain.high)
        )
        assert type(value) is (int if isinstance(domain, randint) else float)


@given(st.integers(0, 2**32 - 1))
@settings(deadline=None)
def test_without_resampling_numbers_scale_and_choices_move_to_a_neighbour(seed):
    rng = np.random.default_rng(seed)
    space = {
        "x": uniform(-100, 100),
        "n": randint(0, 100),
        "act": SPACE["act"],
        "clip": SPACE["clip"],
    }
    config = {"x": 10.0, "n": 2, "act": "relu", "clip": 0.1}
    new = perturb(config, space, rng, resample_probability=0.0)
    assert new["x"] in (pytest.approx(8.0), pytest.approx(12.0))
    assert new["n"] in (1, 3)  # 2 * 0.8 and 2 * 1.2 round back to 2: ints move one step
    assert new["act"] in ("tanh", "elu") and new["clip"] == 0.1


def test_a_value_outside_its_choices_is_drawn_afresh():
    new = perturb({"act": "gelu"}, {"act": SPACE["act"]}, np.random.default_rng(0), 0.0)
    assert new["act"] in SPACE["act"].values


@settings(max_examples=60, deadline=None)
@given(
    grace=st.integers(1, 4),
    factor=st.integers(2, 4),
    extra=st.integers(0, 40),
    values=st.lists(st.floats(-10, 10), min_size=1, max_size=60),
)
def test_asha_continues_every_trial_before_its_next_decision(grace, factor, extra, values):
    # A runner may train up to next_decision without asking: every result before it
    # continues, whatever the values.
    asha = ASHAScheduler(max_t=grace + extra, grace_period=grace, reduction_factor=factor)
    for other, value in enumerate(values[1:]):  # other trials fill the rungs
        for rung in asha.rungs:
            asha.on_result(f"other{other}", rung, value)
    iteration = 0
    while iteration < asha.max_t:
        upto = asha.next_decision("t", iteration)
        assert iteration < upto <= asha.max_t
        for i in range(iteration + 1, upto):
            assert asha.on_result("t", i, values[0]) == CONTINUE
        decision = asha.on_result("t", upto, values[0])
        iteration = upto
        if decision == STOP:
            break
    assert iteration in asha.rungs or iteration == asha.max_t


def test_pbt_decides_every_perturbation_interval_and_fifo_never():
    pbt = population({"low": 0.0, "high": 1.0}, checkpointed=["high"], interval=5)
    assert pbt.next_decision("low", 0) == 5
    assert pbt.next_decision("low", 3) == 5
    assert isinstance(pbt.on_result("low", 5, 0.0), Exploit)
    assert pbt.next_decision("low", 5) == 10
    assert FIFOScheduler().next_decision("t", 7) is None


def test_a_restored_trial_takes_its_next_pbt_step_an_interval_after_the_restored_iteration():
    pbt = population({"low": 0.0, "high": 1.0}, checkpointed=["high"], interval=5)
    assert isinstance(pbt.on_result("low", 5, 0.0), Exploit)
    pbt.on_trial_restore("low", 30)  # it copied a trial that was further on
    assert pbt.next_decision("low", 30) == 35
    assert pbt.on_result("low", 31, 0.0) == CONTINUE


# --- a scheduler's state, written to a file and read back ----------------------------------

RESUMED_SPACE = {"lr": loguniform(1e-4, 1e-1), "hidden": choice([(64, 64), (256, 256)])}
STARTS = {f"t{i}": {"lr": 10.0 ** -(i + 1), "hidden": (64, 64)} for i in range(4)}
STEPS = [
    (trial, iteration, math.nan if (trial, iteration) == ("t3", 5) else rank + 0.1 * iteration)
    for iteration in range(1, 13)
    for rank, trial in enumerate(STARTS)
]
"""Each trial's result at each iteration, round robin: ``(trial, iteration, value)``."""

SCHEDULERS = {
    "fifo": FIFOScheduler,
    "asha": lambda: ASHAScheduler(max_t=12, grace_period=2, reduction_factor=2),
    "pbt": lambda: PBTScheduler(RESUMED_SPACE, 3, quantile_fraction=0.5, seed=0),
}


def drive(scheduler, steps, stopped: set) -> list:
    """Feed ``steps`` to ``scheduler`` as a search would, and carry out its decisions:
    a stopped trial (in ``stopped``) reports no more, one that exploits is restored,
    and every trial saves a checkpoint every second iteration. Returns the decisions."""
    decisions = []
    for trial, iteration, value in steps:
        if trial in stopped:
            continue
        if iteration == 1:
            scheduler.on_trial_add(trial, STARTS[trial])
        decision = scheduler.on_result(trial, iteration, value)
        decisions.append((trial, iteration, decision))
        if decision == STOP:
            stopped.add(trial)
            scheduler.on_trial_complete(trial)
        elif isinstance(decision, Exploit):
            scheduler.on_trial_restore(trial, iteration)
        elif iteration % 2 == 0:
            scheduler.on_checkpoint(trial)
    return decisions


@pytest.mark.parametrize("name", SCHEDULERS)
@pytest.mark.parametrize("cut", [0, 7, 21, 40])
def test_a_scheduler_read_back_from_a_file_decides_what_it_would_have(name, cut, tmp_path):
    whole = drive(SCHEDULERS[name](), STEPS, set())
    scheduler, stopped = SCHEDULERS[name](), set()
    first = drive(scheduler, STEPS[:cut], stopped)
    path = tmp_path / "scheduler.json"
    path.write_text(json.dumps(scheduler.to_state()))
    again = scheduler_from_state(json.loads(path.read_text()))
    assert type(again) is type(scheduler)
    assert first + drive(again, STEPS[cut:], stopped) == whole
    if name != "fifo":  # the run decides something besides continuing
        assert {type(d) for _, _, d in whole if d != CONTINUE} == {"asha": {str}, "pbt": {Exploit}}[
            name
        ]


def test_pbt_read_back_keeps_tuples_in_its_configs_and_asha_its_rungs_order():
    pbt = SCHEDULERS["pbt"]()
    drive(pbt, STEPS, set())
    again = scheduler_from_state(json.loads(json.dumps(pbt.to_state())))
    assert {t: again.config_of(t) for t in STARTS} == {t: pbt.config_of(t) for t in STARTS}
    assert all(isinstance(again.config_of(t)["hidden"], tuple) for t in STARTS)
    asha = SCHEDULERS["asha"]()
    drive(asha, STEPS, set())
    again = scheduler_from_state(json.loads(json.dumps(asha.to_state())))
    assert [list(again.results_at(r).items()) for r in asha.rungs] == [
        list(asha.results_at(r).items()) for r in asha.rungs
    ]


def test_a_scheduler_of_another_class_is_named_not_saved():
    class Patient(TrialScheduler):
        def on_result(self, trial_id, iteration, value):
            return CONTINUE

    state = Patient().to_state()
    assert state["kind"] is None and state["class"].endswith("Patient")
    with pytest.raises(SearchError, match="Patient, which is not saved"):
        scheduler_from_state(state)
