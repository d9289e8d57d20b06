import logging

import pytest

from train.schedule import ScheduleConfig, checkpoint_steps, points_beyond_end, warn_points_beyond_end
from train.optim import OptimConfig, accumulation_steps, lr_at


def test_pythia_schedule_has_154_checkpoints_for_143k_steps():
    steps = checkpoint_steps(ScheduleConfig(kind="pythia"), 143_000, 2_097_152)
    assert len(steps) == 154
    assert steps[:12] == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000]
    assert steps[-2:] == [142_000, 143_000]


def test_last_step_is_always_saved():
    assert checkpoint_steps(ScheduleConfig(kind="pythia"), 1500, 1)[-3:] == [512, 1000, 1500]
    assert checkpoint_steps(ScheduleConfig(kind="custom", points=[3]), 10, 1) == [0, 3, 10]


def test_log_schedule_is_log_spaced_then_linear():
    steps = checkpoint_steps(ScheduleConfig(kind="log", n_log=5, log_until=10_000, every=10_000), 30_000, 1)
    # exp(log(10000) * i/4) for i = 0..4 -> 1, 10, 100, 1000, 10000; then every 10k steps.
    assert steps == [0, 1, 10, 100, 1000, 10_000, 20_000, 30_000]


def test_schedule_in_tokens_rounds_up_to_the_step_that_has_seen_them():
    cfg = ScheduleConfig(kind="custom", unit="tokens", points=[1000, 4096, 4097])
    assert checkpoint_steps(cfg, 10, 4096) == [0, 1, 2, 10]


def test_bad_schedule_key_is_named():
    with pytest.raises(ValueError, match="schedule.kind='weird'"):
        ScheduleConfig(kind="weird")


def test_warmup_then_cosine_to_min_lr():
    cfg = OptimConfig(lr=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(cfg, 0, 110) == pytest.approx(1e-4)  # (0 + 1) / 10 of the peak
    assert lr_at(cfg, 9, 110) == pytest.approx(1e-3)
    assert lr_at(cfg, 10, 110) == pytest.approx(1e-3)
    assert lr_at(cfg, 60, 110) == pytest.approx(1e-4 + 0.5 * 9e-4)  # half way: cos(pi/2) = 0
    assert lr_at(cfg, 110, 110) == pytest.approx(1e-4)


def test_warmup_then_linear_or_constant():
    # 10 warmup steps, then 100 decay steps: progress at step s is (s - 10) / 100
    linear = OptimConfig(lr=1e-3, warmup_steps=10, min_lr_ratio=0.1, decay="linear")
    assert lr_at(linear, 0, 110) == pytest.approx(1e-4)  # warmup is the same for every decay
    assert lr_at(linear, 10, 110) == pytest.approx(1e-3)
    assert lr_at(linear, 35, 110) == pytest.approx(1e-3 - 0.25 * 9e-4)  # 7.75e-4 (cosine: 8.68e-4)
    assert lr_at(linear, 60, 110) == pytest.approx(5.5e-4)
    assert lr_at(linear, 110, 110) == pytest.approx(1e-4)  # down to min_lr_ratio x lr
    constant = OptimConfig(lr=1e-3, warmup_steps=10, min_lr_ratio=0.1, decay="constant")
    assert lr_at(constant, 0, 110) == pytest.approx(1e-4)
    assert [lr_at(constant, s, 110) for s in (10, 60, 109, 110)] == pytest.approx([1e-3] * 4)
    with pytest.raises(ValueError, match="optim.decay='step': expected cosine, linear or constant"):
        OptimConfig(decay="step")


def test_pythia_warmup_is_one_percent():
    cfg = OptimConfig(lr=1e-3, warmup_ratio=0.01)
    assert lr_at(cfg, 1428, 143_000) < 1e-3 and lr_at(cfg, 1429, 143_000) == pytest.approx(1e-3)


def test_accumulation_steps_and_its_error():
    assert accumulation_steps(OptimConfig(global_batch=1024, micro_batch=16), 8) == 8
    with pytest.raises(ValueError, match="optim.global_batch=10 must be a multiple of optim.micro_batch=4"):
        accumulation_steps(OptimConfig(global_batch=10, micro_batch=4), 1)


@pytest.mark.parametrize("kwargs,message", [
    ({"kind": "custom", "points": [-5, 3]}, r"negative positions \[-5\]"),
    ({"kind": "log", "n_log": -3}, "schedule.n_log=-3"),
    ({"kind": "log", "log_until": 0.0}, "schedule.log_until=0.0"),
    ({"every": 0}, "schedule.every=0"),
])
def test_invalid_schedule_values_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ScheduleConfig(**kwargs)


def test_points_beyond_the_end_are_named_in_one_warning(caplog):
    cfg = ScheduleConfig(kind="custom", points=[5, 10, 5000, 7000])
    with caplog.at_level(logging.WARNING, logger="train.schedule"):
        assert checkpoint_steps(cfg, 100, 256) == [0, 5, 10, 100]
        warn_points_beyond_end(cfg, 100, 256)
    assert [r.getMessage() for r in caplog.records] == [
        "schedule.points: 2 of 4 points lie beyond the run's end (steps 100) and get no checkpoint: 5000, 7000"]
    # in tokens: the run ends at 100 x 256 tokens, so only 30000 is beyond it
    tokens = ScheduleConfig(kind="custom", unit="tokens", points=[256, 25600, 30000])
    assert points_beyond_end(tokens, 100, 256) == [30000]
    assert points_beyond_end(ScheduleConfig(kind="custom", points=[5, 100]), 100, 256) == []
