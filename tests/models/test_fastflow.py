"""FastFlow's flow, written here without FrEIA: invertible, and its log-determinant equals log|det| of the
autograd Jacobian on a tiny input; the loss is the negative log-likelihood up to a constant."""

from __future__ import annotations

import torch

from bench.models.fastflow import CouplingStep, Flow, flow_loss


def _flow(channels=4, steps=4):
    torch.manual_seed(0)
    flow = Flow(channels, steps, hidden_ratio=1.0, clamp=2.0, generator=torch.Generator().manual_seed(0)).double()
    for p in flow.parameters():  # large weights, so the scales are far from 1 and the test is not trivial
        p.data.normal_(0, 1.0)
    return flow


def test_flow_is_invertible():
    flow = _flow()
    x = torch.randn(3, 4, 3, 3, dtype=torch.float64)
    z, _ = flow(x)
    assert not torch.allclose(z, x)
    torch.testing.assert_close(flow.inverse(z), x, rtol=1e-9, atol=1e-9)


def test_log_det_equals_the_autograd_jacobian():
    flow = _flow()
    x = torch.randn(1, 4, 2, 2, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda v: flow(v.view(1, 4, 2, 2))[0].flatten(), x.flatten())
    _, log_det = flow(x)
    expected = torch.linalg.slogdet(jac).logabsdet
    assert abs(expected.item()) > 0.5  # the scales really are not 1
    torch.testing.assert_close(log_det[0], expected, rtol=1e-9, atol=1e-9)


def test_steps_alternate_3x3_and_1x1_subnets_and_soft_clamp_the_scale():
    flow = _flow(steps=4)
    kernels = [step.subnet[0].kernel_size[0] for step in flow.steps]
    assert kernels == [3, 1, 3, 1]
    step = CouplingStep(4, 1, 1.0, clamp=2.0, generator=torch.Generator().manual_seed(0))
    for p in step.parameters():
        p.data.fill_(100.0)
    _, log_det = step(torch.ones(1, 4, 1, 1))
    assert log_det.item() <= 2.0 * 2 + 1e-6  # 2 transformed channels × clamp


def test_loss_is_the_negative_log_likelihood_up_to_a_constant():
    z = torch.randn(2, 3, 2, 2)
    log_det = torch.tensor([0.5, -1.0])
    expected = (0.5 * z.pow(2).flatten(1).sum(1) - log_det).mean()
    torch.testing.assert_close(flow_loss([(z, log_det)]), expected)
