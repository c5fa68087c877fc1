from glm5svc.telemetry.decoding import (
    PCIE_COUNTER_MODULUS,
    PcieCounter,
    decode_clock_event_reasons,
    is_power_limited,
    is_thermally_limited,
    pcie_max_counter_rate,
    pcie_wrap_period_s,
)

GEN5_X16 = pcie_max_counter_rate(5, 16)


def feed(counter, readings):
    for t, raw in readings:
        counter.update(raw, t)
    return counter


def test_no_wrap_sums_deltas():
    c = feed(PcieCounter(GEN5_X16), [(0.0, 100), (0.02, 1100), (0.04, 5100)])
    assert (c.total, c.gaps) == (5000, 0)


def test_single_wraps_are_corrected():
    near_top = PCIE_COUNTER_MODULUS - 1000
    readings = [(0.00, near_top), (0.02, 500), (0.04, near_top), (0.06, 24)]
    c = feed(PcieCounter(GEN5_X16), readings)
    assert c.total == 1500 + (near_top - 500) + 1024
    assert c.gaps == 0


def test_recorded_copy_at_full_speed_counts_every_byte():
    # 60 GB/s for 2 s read every 20 ms: the counter wraps many times, never unseen.
    rate, step, t, true_bytes = 60e9, 0.02, 0.0, 0
    c = PcieCounter(GEN5_X16)
    c.update(12345, t)
    while t < 2.0:
        t += step
        true_bytes += int(rate * step)
        c.update((12345 + true_bytes) % PCIE_COUNTER_MODULUS, t)
    assert c.total == true_bytes
    assert true_bytes > 20 * PCIE_COUNTER_MODULUS
    assert c.gaps == 0


def test_interval_long_enough_for_an_unseen_wrap_is_flagged():
    period = pcie_wrap_period_s(GEN5_X16)
    c = feed(PcieCounter(GEN5_X16), [(0.0, 0), (0.02, 10), (0.02 + period * 1.5, 20)])
    assert c.gaps == 1
    assert c.total == 20  # a lower bound: the lost wraps cannot be known
    assert c.max_interval_s > period


def test_slow_link_has_longer_wrap_period():
    assert pcie_wrap_period_s(pcie_max_counter_rate(1, 1)) > 1.0
    assert 0.04 < pcie_wrap_period_s(GEN5_X16) < 0.075
    assert pcie_max_counter_rate(None, None) >= pcie_max_counter_rate(6, 16)


def test_clock_reason_decoding():
    assert decode_clock_event_reasons(0) == []
    assert decode_clock_event_reasons(0x1) == ["gpu_idle"]
    assert decode_clock_event_reasons(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    names = decode_clock_event_reasons(0x80 | 0x1000)
    assert names == ["hw_power_brake_slowdown", "unknown_0x1000"]
    assert is_power_limited(0x4) and is_power_limited(0x80) and not is_power_limited(0x1)
    assert is_thermally_limited(0x20) and is_thermally_limited(0x40)
    assert not is_thermally_limited(0x4)
