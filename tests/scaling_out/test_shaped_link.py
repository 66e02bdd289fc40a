"""Lesson 06 §8: the tbf-shaped link between lesson 11's two namespace hosts (root only)
and its model."""
import pytest

from ddl_lab.scaling_out import shaped_link as shaped
from ddl_lab.scaling_out.hosts import VirtualHosts, unavailable

WHY = unavailable()


def test_the_model_sends_only_shards_over_the_link():
    S, b = 1 << 20, 8 / 200e6
    m = shaped.model(S, 2, 2, 0.0, 0.0, 0.0, b)
    assert m["ring"] == pytest.approx(6 * S / 4 * b)            # 2(n−1) chunks of S/4
    assert m["two_level"] == pytest.approx(2 * S / 2 * b)       # 2 steps, 2 owners × S/4
    assert m["two_level"] / m["ring"] == pytest.approx(2 / 3)


def test_tbf_limits_each_end_of_the_veth():
    vh = VirtualHosts()
    cmds = shaped.tbf_commands(vh, 50)
    assert len(cmds) == 2
    for cmd, h in zip(cmds, vh.hosts):
        assert cmd[:4] == h.prefix and cmd[4:] == [
            "tc", "qdisc", "add", "dev", h.veth, "root", "tbf", "rate", "50mbit", "burst",
            "32kb", "latency", "400ms"]


@pytest.mark.skipif(WHY is not None, reason=f"no network namespaces: {WHY}")
def test_over_a_shaped_veth_both_are_held_to_the_link_rate():
    rate = 200.0
    r = shaped.run_shaped(1 << 20, rate_mbit=rate)
    assert r["hosts"] == {0: "a", 1: "a", 2: "b", 3: "b"}
    floor = (1 << 20) * 8 / (rate * 1e6)                        # S over the link, in seconds
    assert r["measured"]["ring"] >= 0.9 * 1.5 * floor            # 1.5·S crosses each way
    assert r["measured"]["two_level"] >= 0.9 * floor             # S crosses each way
