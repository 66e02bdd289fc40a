"""check.ep_layer passes right answers written in several styles and names the mistakes
learners make (lesson 14, task 1). The functions are module-level so that they pickle to the
workers."""
import numpy as np
import pytest
import torch
import torch.distributed as dist

from ddl_lab import check
from ddl_lab.check import CheckFailed
from ddl_lab.check import experts as X
from ddl_lab.experts.parallel import ep_bytes, ep_moe
from ddl_lab.experts.moe import MoEConfig


def stub(*args):
    raise NotImplementedError("replace this line with your code")


def layer(x, expert, gate, run_experts, experts, equal=False, exchange=True, reorder=True,
          residual="x", use_gate=True):
    """An expert-parallel layer with a learner's mistake switched on by each flag."""
    n = dist.get_world_size()
    per = experts // n
    token, choice = (expert >= 0).nonzero(as_tuple=True)
    ids = expert[token, choice]
    order = torch.argsort(ids, stable=True)
    unsorted = token
    token, choice, ids = token[order], choice[order], ids[order]
    counts = torch.bincount(ids, minlength=experts)
    incoming = torch.empty_like(counts)
    dist.all_to_all_single(incoming, counts)
    send = counts.view(n, per).sum(1).tolist()
    receive = incoming.view(n, per).sum(1).tolist() if exchange else send
    rows = x[token].contiguous()
    if equal:
        arrived = torch.empty_like(rows)
        dist.all_to_all_single(arrived, rows)
    else:
        arrived = x.new_empty(sum(receive), x.shape[1])
        dist.all_to_all_single(arrived, rows, receive, send)
    local = torch.arange(per).repeat(n).repeat_interleave(incoming)
    done = run_experts(arrived, local)
    back = x.new_empty(len(token), x.shape[1])
    dist.all_to_all_single(back, done.contiguous(), send, receive)
    weighted = back * gate[token, choice, None] if use_gate else back
    y = x.index_add(0, token if reorder else unsorted, weighted)
    if residual == "zero":
        y[(expert < 0).all(1)] = 0
    elif residual == "none":
        y = y - x
    return y


def right_numpy_gathered(x, expert, gate, run_experts, experts):
    """Another right style: the counts all-gathered (Megatron's way), a loop per destination
    rank, float64 arithmetic at home, a numpy array returned."""
    rank, n = dist.get_rank(), dist.get_world_size()
    per = experts // n
    counts = torch.zeros(experts, dtype=torch.int64)
    pairs = [(t, c, int(expert[t, c])) for t in range(len(x)) for c in range(expert.shape[1])
             if expert[t, c] >= 0]
    for _, _, e in pairs:
        counts[e] += 1
    table = [torch.zeros_like(counts) for _ in range(n)]
    dist.all_gather(table, counts)
    mine = [row[rank * per:(rank + 1) * per] for row in table]      # from each rank
    by_rank = [[p for p in sorted(pairs, key=lambda p: p[2]) if p[2] // per == j]
               for j in range(n)]
    rows = torch.cat([x[[t for t, _, _ in group]] for group in by_rank]) if pairs else \
        x.new_zeros(0, x.shape[1])
    send = [len(g) for g in by_rank]
    receive = [int(m.sum()) for m in mine]
    arrived = x.new_empty(sum(receive), x.shape[1])
    dist.all_to_all_single(arrived, rows, receive, send)
    local = torch.cat([torch.arange(per).repeat_interleave(m) for m in mine])
    back = x.new_empty(len(rows), x.shape[1])
    dist.all_to_all_single(back, run_experts(arrived, local).contiguous(), send, receive)
    y = x.double().numpy().copy()
    for (t, c, _), out in zip([p for g in by_rank for p in g], back.double().numpy()):
        y[t] += float(gate[t, c]) * out
    return y


def every_token_everywhere(x, expert, gate, run_experts, experts):
    """Right values, but every token (with its routing) goes to every rank."""
    rank, n = dist.get_rank(), dist.get_world_size()
    per = experts // n
    T = torch.tensor([len(x)])
    sizes = torch.empty(n, dtype=torch.int64)
    dist.all_to_all_single(sizes, T.repeat(n))
    sizes = sizes.tolist()
    k = expert.shape[1]
    got_x = x.new_empty(sum(sizes), x.shape[1])
    dist.all_to_all_single(got_x, x.repeat(n, 1), sizes, [len(x)] * n)
    got_e = expert.new_empty(sum(sizes), k)
    dist.all_to_all_single(got_e, expert.repeat(n, 1), sizes, [len(x)] * n)
    out = torch.zeros(len(got_x), k, x.shape[1], dtype=x.dtype)
    for c in range(k):
        here = (got_e[:, c] >= 0) & (got_e[:, c] // per == rank)
        if here.any():
            out[here, c] = run_experts(got_x[here], got_e[here, c] - rank * per)
    back = x.new_empty(n * len(x), k, x.shape[1])
    dist.all_to_all_single(back, out, [len(x)] * n, sizes)
    total = back.view(n, len(x), k, x.shape[1]).sum(0)
    return x + (total * gate[..., None]).sum(1)


def equal_splits(*a):
    return layer(*a, equal=True)


def not_exchanged(*a):
    return layer(*a, exchange=False)


def sorted_order(*a):
    return layer(*a, reorder=False)


def dropped_zero(*a):
    return layer(*a, residual="zero")


def no_residual(*a):
    return layer(*a, residual="none")


def no_gate(*a):
    return layer(*a, use_gate=False)


def global_ids(x, expert, gate, run_experts, experts):
    """Passes the global expert ids to run_experts."""
    def run(rows, ids):
        return run_experts(rows, ids + dist.get_rank() * (experts // dist.get_world_size()))
    return layer(x, expert, gate, run, experts)


def in_place(x, expert, gate, run_experts, experts):
    y = layer(x, expert, gate, run_experts, experts)
    x.copy_(y)
    return x


def borrowed(x, expert, gate, run_experts, experts):
    return ep_moe({}, x, MoEConfig(hidden=x.shape[1], experts=experts))


def test_the_solution_and_other_styles_pass(capsys, solution):
    check.ep_layer(solution("14_experts", "my_ep_layer"))
    check.ep_layer(right_numpy_gathered, seed=5)
    assert capsys.readouterr().out.count("✔ ep_layer: passed") == 2


def test_stub_and_the_package_s_layer_are_refused():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check.ep_layer(stub)
    with pytest.raises(CheckFailed, match="package's own implementation"):
        check.ep_layer(borrowed)


@pytest.mark.parametrize("wrong, fault", [
    (equal_splits, r"equal splits assumed: rank \d called dist.all_to_all_single on \d+ rows "
                   r"without split sizes"),
    (not_exchanged, r"split sizes not exchanged: rank \d expected to receive \[.*\] rows, the "
                    r"same as it sends"),
    (sorted_order, r"rank \d of \d: element .* added to another token's row: the combine "
                   r"returns rows in the order they were sent"),
    (dropped_zero, r"a token that lost every choice came back as zeros"),
    (no_residual, r"the residual is missing"),
    (no_gate, r"the gate was not applied"),
    (global_ids, r"run_experts on rank \d got local id \d+, but the rank holds"),
    (in_place, r"changed its argument\(s\) x in place"),
    (every_token_everywhere, r"rank \d of \d put [\d,]+ bytes of rows on the wire, but its "
                             r"pairs need only [\d,]+ .*sent every token to every rank"),
])
def test_wrong_layers_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault) as first:
        check.ep_layer(wrong)
    if wrong is sorted_order:                           # the same verdict every run
        with pytest.raises(CheckFailed) as again:
            check.ep_layer(wrong)
        assert str(again.value) == str(first.value)


def test_the_bytes_allowed_are_ep_bytes_forward():
    """The rows a rank may send are exactly ``parallel.ep_bytes``' dispatch + combine, the
    counts its all-to-all of E int64 numbers."""
    case = next(iter(X.Trial("ep_layer", stub, 0, X.EP_FIXED)))
    spec = X._ep_spec(case)
    cfg = MoEConfig(hidden=spec["h"], experts=spec["E"])
    a = spec["h"] * np.dtype(spec["dtype"]).itemsize
    for r, row in enumerate(ep_bytes(cfg, spec["pairs"], torch.float64)):
        n = spec["n"]
        need = a * (sum(spec["pairs"][r]) - spec["pairs"][r][r]
                    + sum(spec["pairs"][i][r] for i in range(n) if i != r))
        assert row["forward"]["dispatch"] + row["forward"]["combine"] == need
        assert row["forward"]["splits"] == 8 * spec["E"] * (n - 1) / n


def test_the_cases_have_the_edges():
    """Ranks with no tokens, unequal counts, dropped pairs and tokens that lost every choice."""
    specs = [X._ep_spec(c) for c in X.Trial("ep_layer", stub, 0, X.EP_FIXED, draws=4,
                                            draw=X._draw_ep)]
    assert any(0 in s["tokens"] for s in specs)
    assert all(len(set(s["tokens"])) > 1 for s in specs[:3])
    assert any((e < 0).all(1).any() for s in specs for e in s["expert"] if len(e))
    assert {s["k"] for s in specs} == {1, 2} and {s["per"] for s in specs} == {1, 2}
