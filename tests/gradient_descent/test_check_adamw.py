"""Lesson 01, task 6 (``check.adamw_step``): AdamW by hand against ``torch.optim.AdamW``.
Right answers in several styles pass (the solution's functional step, a class kept in
``state``, tensors updated in place, numpy in float64, a torch.optim.Optimizer subclass); each mistake learners write fails
with its named message; a function that runs torch.optim's own Adam(W) is refused; the
verdict is the same on every run."""
import numpy as np
import pytest
import torch

from ddl_lab import check
from ddl_lab.check import CheckFailed

NB = "01_gradient_descent"


def _adamw(mistake: str = ""):
    """An AdamW step as a learner writes it, with ``mistake`` (one of the catalogue's)."""
    def my_adamw_step(params, grads, state, lr, betas, eps, weight_decay):
        b1, b2 = betas
        if mistake != "no_state":
            state["t"] = state.get("t", -1 if mistake == "t_zero" else 0) + 1
        t = {"first_bias": 1, "no_state": 1}.get(mistake, state.get("t"))
        t = t + 1 if mistake == "t_plus" else t
        out = []
        for i, (p, g) in enumerate(zip(params, grads)):
            if mistake == "l2":
                g = g + weight_decay * p
            if mistake == "mutate":
                g.mul_(0.5)
            fresh = mistake == "no_state" or ("m", i) not in state
            m = torch.zeros_like(p) if fresh else state["m", i]
            v = torch.zeros_like(p) if fresh else state["v", i]
            m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
            state["m", i], state["v", i] = m, v
            mh, vh = (m, v) if mistake == "no_bias" else (m / (1 - b1 ** t), v / (1 - b2 ** t))
            step = lr * mh / ((vh + eps).sqrt() if mistake == "eps_inside" else vh.sqrt() + eps)
            if mistake == "after":
                out.append((p - step) * (1 - lr * weight_decay))
            elif mistake == "l2":
                out.append(p - step)
            else:
                out.append(p * (1 - (1 if mistake == "no_lr" else lr) * weight_decay) - step)
        return out
    return my_adamw_step


class _Moments:
    """A learner's class: one object per run, kept in ``state``."""

    def __init__(self, params, betas):
        self.b1, self.b2 = betas
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0

    def direction(self, i, g, eps):
        self.m[i] = self.b1 * self.m[i] + (1 - self.b1) * g
        self.v[i] = self.b2 * self.v[i] + (1 - self.b2) * g ** 2
        m_hat = self.m[i] / (1 - self.b1 ** self.t)
        return m_hat / (torch.sqrt(self.v[i] / (1 - self.b2 ** self.t)) + eps)


def adamw_class(params, grads, state, lr, betas, eps, weight_decay):
    opt = state.setdefault("opt", _Moments(params, betas))
    opt.t += 1
    return [(1 - lr * weight_decay) * p - lr * opt.direction(i, g, eps)
            for i, (p, g) in enumerate(zip(params, grads))]


def adamw_in_place(params, grads, state, lr, betas, eps, weight_decay):
    state["step"] = state.get("step", 0) + 1
    for i, (p, g) in enumerate(zip(params, grads)):
        m, v = state.setdefault(i, (torch.zeros_like(p), torch.zeros_like(p)))
        m.lerp_(g, 1 - betas[0])
        v.mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
        denom = (v / (1 - betas[1] ** state["step"])).sqrt_().add_(eps)
        p.mul_(1 - lr * weight_decay).addcdiv_(m, denom, value=-lr / (1 - betas[0] ** state["step"]))
    return params


class HandOptimizer(torch.optim.Optimizer):
    """A learner's own ``torch.optim.Optimizer`` subclass: the base class is not Adam."""

    def __init__(self, params, lr, betas, eps, weight_decay):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "wd": weight_decay})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            (b1, b2), lr = group["betas"], group["lr"]
            for p in group["params"]:
                s = self.state[p]
                s["t"] = s.get("t", 0) + 1
                s["m"] = b1 * s.get("m", 0) + (1 - b1) * p.grad
                s["v"] = b2 * s.get("v", 0) + (1 - b2) * p.grad ** 2
                p.mul_(1 - lr * group["wd"])
                p.sub_(lr * s["m"] / (1 - b1 ** s["t"]) /
                       ((s["v"] / (1 - b2 ** s["t"])).sqrt() + group["eps"]))


def adamw_subclass(params, grads, state, lr, betas, eps, weight_decay):
    if "opt" not in state:
        state["mine"] = [p.clone() for p in params]
        state["opt"] = HandOptimizer(state["mine"], lr, betas, eps, weight_decay)
    for p, g in zip(state["mine"], grads):
        p.grad = g.clone()
    state["opt"].step()
    return [p.clone() for p in state["mine"]]


def adamw_numpy(params, grads, state, lr, betas, eps, weight_decay):
    theta = [p.numpy().astype(np.float64) for p in params]
    g = [x.numpy().astype(np.float64) for x in grads]
    t = state["t"] = state.get("t", 0) + 1
    m = state["m"] = [betas[0] * a + (1 - betas[0]) * b for a, b in zip(state.get("m", [0] * len(g)), g)]
    v = state["v"] = [betas[1] * a + (1 - betas[1]) * b * b for a, b in zip(state.get("v", [0] * len(g)), g)]
    return [th - lr * weight_decay * th - lr * (a / (1 - betas[0] ** t)) /
            (np.sqrt(b / (1 - betas[1] ** t)) + eps) for th, a, b in zip(theta, m, v)]


@pytest.mark.parametrize("right", [adamw_class, adamw_in_place, adamw_numpy, adamw_subclass,
                                   _adamw()])
def test_adamw_right_answers_pass(right, solution, capsys):
    check.adamw_step(right)
    assert capsys.readouterr().out.count("✔ adamw_step: passed") == 1


@pytest.mark.parametrize("mistake, message", [
    ("no_bias", "no bias correction"),
    ("l2", "Adam with an L2 penalty, not AdamW"),
    ("after", "weight decay was applied after the Adam update"),
    ("no_lr", "scaled by λ alone"),
    ("eps_inside", "ε was added inside the square root"),
    ("t_plus", "off by one: your first step used t = 2"),
    ("t_zero", "the step count starts at 0"),
    ("first_bias", "bias correction of the first step was used at every step"),
    ("no_state", "every step behaved like the first"),
    ("mutate", r"changed its argument `grads\[0\]` in place"),
])
def test_adamw_wrong_answers_fail_naming_the_mistake(mistake, message):
    with pytest.raises(CheckFailed, match=message):
        check.adamw_step(_adamw(mistake))


def test_adamw_a_function_running_torch_optim_is_refused():
    def through_torch(params, grads, state, lr, betas, eps, weight_decay):
        if "opt" not in state:
            state["ps"] = [p.clone().requires_grad_(True) for p in params]
            state["opt"] = torch.optim.AdamW(state["ps"], lr=lr, betas=betas, eps=eps,
                                             weight_decay=weight_decay)
        for p, g in zip(state["ps"], grads):
            p.grad = g.clone()
        state["opt"].step()
        return [p.detach().clone() for p in state["ps"]]
    with pytest.raises(CheckFailed, match="ran torch.optim's Adam code"):
        check.adamw_step(through_torch)


def test_adamw_state_kept_in_a_global_is_named():
    kept = {}

    def global_state(params, grads, state, lr, betas, eps, weight_decay):
        return _adamw()(params, grads, kept, lr, betas, eps, weight_decay)
    with pytest.raises(CheckFailed, match="keep state outside `state`"):
        check.adamw_step(global_state)


def test_adamw_the_verdict_is_the_same_on_every_run():
    messages = []
    for _ in range(2):
        with pytest.raises(CheckFailed) as e:
            check.adamw_step(_adamw("after"))
        messages.append(str(e.value))
    assert messages[0] == messages[1]
