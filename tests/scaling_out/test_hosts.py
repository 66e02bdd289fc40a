"""Two hosts on one machine (lesson 11): the commands, the refusal without root, and — where
namespaces can be made — torchrun across the veth pair, bytes counted, everything removed."""
import os
import subprocess
import sys

import pytest

from ddl_lab import shared_cluster
from ddl_lab.scaling_out import hosts as H
from ddl_lab.scaling_out.launch import torchrun_command

WHY = H.unavailable()
needs_netns = pytest.mark.skipif(WHY is not None, reason=f"no network namespaces: {WHY}")


def ours():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [ln.split()[0] for ln in out.splitlines() if ln.startswith(f"ddl-{os.getpid()}-")]


def test_setup_puts_the_veth_ends_straight_into_the_namespaces():
    a, b = H._hosts(123, 4, "10.200.0")
    cmds = [" ".join(c) for c in H.setup_commands(a, b)]
    assert "ip link add dv123-4a netns ddl-123-4-a type veth peer name dv123-4b netns " \
           "ddl-123-4-b" in cmds
    assert "ip -n ddl-123-4-b addr add 10.200.0.2/30 dev dv123-4b" in cmds
    assert sum("link set lo up" in c for c in cmds) == 2
    assert len(a.veth) <= 15                                  # Linux's interface-name limit


def test_torchrun_commands_name_the_endpoint_and_their_own_address():
    vh = H.VirtualHosts()
    ca, cb = vh.commands("m:f", nproc=2, port=29400)
    assert "--rdzv-endpoint=10.200.0.1:29400" in ca and "--rdzv-endpoint=10.200.0.1:29400" in cb
    assert "--rdzv-conf=is_host=1" in ca and "--rdzv-conf=is_host=0" in cb
    assert "--local-addr=10.200.0.1" in ca and "--local-addr=10.200.0.2" in cb
    assert torchrun_command("m:f", nproc=3)[:4] == ["torchrun", "--nnodes=1",
                                                    "--nproc-per-node=3", "--standalone"]


def test_without_root_it_says_why_and_makes_nothing(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "root" in H.unavailable()
    with pytest.raises(PermissionError, match="needs root.*setup_commands"):
        with H.VirtualHosts():
            pass


def test_where_am_i_runs_unchanged_on_the_notebook_s_cluster():
    info = shared_cluster(3).run(H.where_am_i)
    assert [i["sum_of_ranks"] for i in info] == [3.0] * 3
    assert [i["env"]["RANK"] for i in info] == ["0", "1", "2"]


@needs_netns
def test_torchrun_across_two_namespaces_meets_allreduces_and_crosses_the_wire():
    with H.VirtualHosts() as vh:
        before = vh.veth_bytes()
        jobs = vh.torchrun("ddl_lab.scaling_out.hosts:where_am_i", 1 << 20, 1, nproc=2,
                           timeout=90)
        after = vh.veth_bytes()
        names = [h.name for h in vh.hosts]
        assert all(j.ok for j in jobs), "\n".join(j.tail() for j in jobs)
    ranks = jobs[0].results()
    assert sorted(ranks) == [0, 1, 2, 3] and {r["sum_of_ranks"] for r in ranks.values()} == {6.0}
    assert {r["env"]["MASTER_ADDR"] for r in ranks.values()} == {"10.200.0.1"}
    assert [ranks[r]["addr"] for r in range(4)] == ["10.200.0.1"] * 2 + ["10.200.0.2"] * 2
    assert ranks[0]["netns"] == ranks[1]["netns"] != ranks[2]["netns"] == ranks[3]["netns"]
    sent = after[names[0]]["tx"] - before[names[0]]["tx"]
    assert sent > 2 * (1 << 20)                     # two 1 MB allreduces crossed, at least
    assert after[names[0]]["tx"] == after[names[1]]["rx"]    # the pair: what A sends, B gets
    assert not set(names) & set(ours())


@needs_netns
def test_namespaces_go_away_when_the_block_raises():
    with pytest.raises(RuntimeError, match="planted"):
        with H.VirtualHosts() as vh:
            assert vh.exists()
            raise RuntimeError("planted")
    assert not vh.exists()


@needs_netns
def test_namespaces_a_dead_process_left_behind_are_removed():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    name = f"ddl-{dead.pid}-0-a"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        with H.VirtualHosts():
            listed = subprocess.run(["ip", "netns", "list"], capture_output=True,
                                    text=True).stdout
        assert name not in listed
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_two_hosts_falls_back_to_loopback_when_forced_or_without_root(monkeypatch):
    monkeypatch.setenv(H.FORCE_LOOPBACK, "1")
    assert isinstance(H.two_hosts(), H.LoopbackHosts)
    monkeypatch.setenv(H.FORCE_LOOPBACK, "0")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert isinstance(H.two_hosts(), H.LoopbackHosts)


def test_the_no_root_path_runs_two_torchrun_agents_on_127_0_0_2_and_3(monkeypatch):
    """CI takes the path a learner without root takes (forced by the setting)."""
    monkeypatch.setenv(H.FORCE_LOOPBACK, "1")
    with H.two_hosts() as vh:
        ca, cb = vh.commands("m:f", port=29400)
        assert "--nnodes=2" in ca and "--rdzv-endpoint=127.0.0.2:29400" in cb
        assert "--local-addr=127.0.0.2" in ca and "--local-addr=127.0.0.3" in cb
        jobs = vh.torchrun("ddl_lab.scaling_out.hosts:where_am_i", nproc=1, timeout=90,
                           port=H.free_port())
        assert vh.veth_bytes() is None                       # no cable to count bytes on
    assert all(j.ok for j in jobs), "\n".join(j.tail() for j in jobs)
    ranks = jobs[0].results()
    assert sorted(ranks) == [0, 1] and {r["sum_of_ranks"] for r in ranks.values()} == {1.0}
    assert {r["env"]["MASTER_ADDR"] for r in ranks.values()} == {"127.0.0.2"}
    assert [ranks[r]["env"]["GROUP_RANK"] for r in (0, 1)] == ["0", "1"]
    assert ranks[0]["netns"] == ranks[1]["netns"]           # one network: the machine's own
