"""Pure parsers and the counter arithmetic of the RAPL collector, from literal strings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collectors.rapl import (
    CpuModel,
    ZoneName,
    counter_delta,
    energy_unit_exponent,
    parse_cpu_list,
    parse_cpuinfo,
    parse_perf_event,
    parse_uint,
    parse_zone_name,
    permission_guidance,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("package-0\n", ZoneName("package", 0)),
        ("package-1", ZoneName("package", 1)),
        ("package-0-die-1\n", ZoneName("package", 0, 1)),
        ("package-12-die-3", ZoneName("package", 12, 3)),
        ("psys\n", ZoneName("psys", 0)),
        ("psys-1\n", ZoneName("psys", 1)),
        ("core\n", ZoneName("core")),
        ("uncore", ZoneName("uncore")),
        ("dram\n", ZoneName("dram")),
    ],
)
def test_parse_zone_name(text: str, expected: ZoneName) -> None:
    assert parse_zone_name(text) == expected


def test_parse_zone_name_rejects_empty() -> None:
    with pytest.raises(ValueError, match="empty"):
        parse_zone_name("\n")


def test_parse_uint() -> None:
    assert parse_uint("262143328850\n") == 262143328850
    assert parse_uint("0\n") == 0
    for bad in ("", "\n", "-1", "12a", "1.5"):
        with pytest.raises(ValueError):
            parse_uint(bad)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0\n", [0]),
        ("0,18\n", [0, 18]),
        ("0-3,8\n", [0, 1, 2, 3, 8]),
        ("\n", []),
        ("56,0", [0, 56]),
    ],
)
def test_parse_cpu_list(text: str, expected: list[int]) -> None:
    assert parse_cpu_list(text) == expected


def test_parse_perf_event() -> None:
    assert parse_perf_event("event=0x02\n") == 2
    assert parse_perf_event("event=0x05") == 5
    assert parse_perf_event("umask=0x1,event=0x03\n") == 3
    with pytest.raises(ValueError):
        parse_perf_event("config=1\n")


def test_parse_cpuinfo_reads_the_first_processor() -> None:
    text = (
        "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\n"
        "model name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz\n\n"
        "processor\t: 1\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n\n"
    )
    assert parse_cpuinfo(text) == CpuModel("GenuineIntel", 6, 85)
    with pytest.raises(ValueError):
        parse_cpuinfo("processor\t: 0\n")


def test_energy_unit_exponent() -> None:
    assert energy_unit_exponent(0x000A0E03) == 14  # most Intel: 61.035 µJ
    assert energy_unit_exponent(0x000A1003) == 16  # AMD Zen: 15.259 µJ
    assert energy_unit_exponent(0xFFFF_FFFF_000A_1003) == 16


def test_counter_delta() -> None:
    assert counter_delta(10, 15, 100) == (5, False)
    assert counter_delta(90, 5, 100) == (15, True)
    assert counter_delta(7, 7, 100) == (0, False)
    assert counter_delta(5, 9, None) == (4, False)
    with pytest.raises(ValueError, match="backwards"):
        counter_delta(5, 3, None)


@given(
    modulus=st.integers(min_value=2, max_value=1 << 40),
    data=st.data(),
)
def test_counter_delta_recovers_any_increase_below_one_wrap(
    modulus: int, data: st.DataObject
) -> None:
    prev = data.draw(st.integers(min_value=0, max_value=modulus - 1))
    d = data.draw(st.integers(min_value=0, max_value=modulus - 1))
    assert counter_delta(prev, (prev + d) % modulus, modulus) == (d, prev + d >= modulus)


def test_permission_guidance_is_exact() -> None:
    assert permission_guidance(["intel-rapl:0", "intel-rapl:0:0"]) == (
        "RAPL energy counters are readable by root only (Linux >= 5.10 and its stable backports "
        "made energy_uj mode 0400, CVE-2020-8694). As root, do one of:\n"
        "  1. udev rule (persistent): create /etc/udev/rules.d/99-nrg-rapl.rules containing\n"
        '      SUBSYSTEM=="powercap", ACTION=="add", KERNEL=="intel-rapl:*|intel-rapl-tpmi:*", '
        'RUN+="/bin/chgrp nrg /sys%p/energy_uj", RUN+="/bin/chmod g+r /sys%p/energy_uj"\n'
        "    then run: groupadd -f nrg && usermod -aG nrg $USER && udevadm control --reload-rules "
        "&& udevadm trigger --action=add --subsystem-match=powercap  (log in again for the group)\n"
        "  2. sysfsutils (persistent): add to /etc/sysfs.conf\n"
        "      mode class/powercap/intel-rapl:0/energy_uj = 0444\n"
        "      mode class/powercap/intel-rapl:0:0/energy_uj = 0444\n"
        "    then run: systemctl restart sysfsutils\n"
        "  3. until the next reboot: chmod a+r /sys/class/powercap/intel-rapl:0/energy_uj "
        "/sys/class/powercap/intel-rapl:0:0/energy_uj\n"
        "  4. in a container: grant access on the host (1 or 2), run the agent as root, and "
        "bind-mount the host's tree read-only: -v /sys/class/powercap:/host/sys/class/powercap:ro "
        "-v /sys/devices/virtual/powercap:/host/sys/devices/virtual/powercap:ro, with "
        'root = "/host" in [[collectors.rapl]]\n'
        "  or use the perf backend, which this change does not affect: "
        "sysctl kernel.perf_event_paranoid=0 (or give the agent CAP_PERFMON)."
    )


@given(
    modulus=st.integers(min_value=1_000, max_value=262143328850),
    start=st.integers(min_value=0, max_value=10**12),
    steps=st.lists(
        st.tuples(st.integers(min_value=0, max_value=1 << 40), st.booleans()),
        min_size=1,
        max_size=40,
    ),
)
def test_energy_survives_wraps_and_failed_reads(
    modulus: int, start: int, steps: list[tuple[int, bool]]
) -> None:
    """Whatever the wraps and failed reads, the cumulative energy after a good read is the sum
    of every increment so far, as long as less than one wrap passes between two good reads."""
    from fractions import Fraction

    from collectors.rapl import RaplIO, _Counter

    class Clock(RaplIO):
        now = 0

        def monotonic_ns(self) -> int:
            return self.now

    io = Clock()
    state = {"raw": start % modulus, "fail": False}

    def read() -> int:
        if state["fail"]:
            raise OSError(5, "Input/output error")
        return state["raw"]

    c = _Counter({"domain": "package"}, "test", read, Fraction(1, 10**6), modulus)
    assert c.first(io) is None
    # Keep the increments between two good reads under one wrap: cap each, fail at most 7 in a row.
    cap = modulus // 8
    expected = 0
    run = 0
    pending = 0  # µJ since the last good read
    for inc, fail in steps:
        inc %= cap + 1
        fail = fail and run < 7
        expected += inc
        pending += inc
        state["raw"] = (state["raw"] + inc) % modulus
        state["fail"] = fail
        io.now += 1_000_000_000
        fields = c.sample(io)
        if fail:
            assert fields is None
        else:
            assert fields is not None
            assert fields["energy_joules"] == expected / 10**6
            # The energy since the last good read over the (run + 1) seconds since then.
            assert fields["power_watts"] == pytest.approx(pending / 10**6 / (run + 1), rel=1e-12)
            pending = 0
        run = run + 1 if fail else 0


def test_parse_cpu_list_is_bounded_by_the_cpu_count() -> None:
    from collectors.rapl import MAX_CPUS

    # Once a multi-gigabyte range built for seconds; now refused at once.
    with pytest.raises(ValueError, match="beyond"):
        parse_cpu_list("0-12777777777")
    with pytest.raises(ValueError, match="beyond"):
        parse_cpu_list(f"0-{MAX_CPUS}")
    assert parse_cpu_list(f"{MAX_CPUS - 1}") == [MAX_CPUS - 1]
    with pytest.raises(ValueError, match="beyond the 4 CPUs"):
        parse_cpu_list("0-4", max_cpus=4)
    assert parse_cpu_list("0-3", max_cpus=4) == [0, 1, 2, 3]
    for bad in ("3-1", "x", "1-", "-1", "0--2", "٣"):
        with pytest.raises(ValueError):
            parse_cpu_list(bad)


def test_parse_uint_is_64_bit() -> None:
    assert parse_uint("18446744073709551615") == 2**64 - 1
    for bad in ("18446744073709551616", "1" * 5000, "²"):
        with pytest.raises(ValueError):
            parse_uint(bad)


# Fuzz targets: every parser raises ValueError (its documented type) or returns.
_rapl_text = st.one_of(
    st.text(max_size=120),
    st.lists(
        st.sampled_from(
            [
                "0",
                "1",
                "9",
                "-",
                ",",
                "package",
                "-die-",
                "psys",
                "event=",
                "0x",
                "ff",
                "\n",
                ":",
                "vendor_id",
                "cpu family",
                "model",
                "GenuineIntel",
                " ",
                "9" * 30,
                "²",
                "٣",
            ]
        ),
        max_size=30,
    ).map("".join),
)


@given(_rapl_text)
def test_fuzz_rapl_parsers_raise_only_value_error(text: str) -> None:
    for parser in (parse_zone_name, parse_uint, parse_cpu_list, parse_perf_event, parse_cpuinfo):
        try:
            result = parser(text)  # type: ignore[operator]
        except ValueError:
            continue
        if parser is parse_cpu_list:
            assert all(0 <= cpu < 8192 for cpu in result)
