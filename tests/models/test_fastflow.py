"""FastFlow's flow, written here without FrEIA: invertible, and its log-determinant equals log|det| of the
autograd Jacobian on a tiny input (with and without the global affine); the global affine is the released step's;
the loss is the negative log-likelihood up to a constant."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from bench.models.fastflow import CouplingStep, Flow, flow_loss
from bench.registry import get


def _flow(channels=4, steps=4, global_affine=True):
    torch.manual_seed(0)
    flow = Flow(channels, steps, hidden_ratio=1.0, clamp=2.0, generator=torch.Generator().manual_seed(0),
                global_affine=global_affine).double()
    for p in flow.parameters():  # large weights, so the scales are far from 1 and the test is not trivial
        p.data.normal_(0, 1.0)
    return flow


@pytest.mark.parametrize("global_affine", [True, False])
def test_flow_is_invertible(global_affine):
    flow = _flow(global_affine=global_affine)
    x = torch.randn(3, 4, 3, 3, dtype=torch.float64)
    z, _ = flow(x)
    assert not torch.allclose(z, x)
    torch.testing.assert_close(flow.inverse(z), x, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("global_affine", [True, False])
def test_log_det_equals_the_autograd_jacobian(global_affine):
    flow = _flow(global_affine=global_affine)
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
    step = CouplingStep(4, 1, 1.0, clamp=2.0, generator=torch.Generator().manual_seed(0), global_affine=False)
    for p in step.parameters():
        p.data.fill_(100.0)
    _, log_det = step(torch.ones(1, 4, 1, 1))
    assert log_det.item() <= 2.0 * 2 + 1e-6  # 2 transformed channels × clamp


def test_loss_is_the_negative_log_likelihood_up_to_a_constant():
    z = torch.randn(2, 3, 2, 2)
    log_det = torch.tensor([0.5, -1.0])
    expected = (0.5 * z.pow(2).flatten(1).sum(1) - log_det).mean()
    torch.testing.assert_close(flow_loss([(z, log_det)]), expected)


def test_global_affine_is_the_released_step():
    """routing-cad-icdm@6fc5a98 `src/pyclad/models/fastflow/standard/flow.py`: per-channel global_scale/offset
    (:49-51), scale = 0.1·softplus_β=0.5(global_scale) (:42, :59-60), initialised so that the scale is 1
    (`_global_affine_init_value(1.0)` = 2·log(e⁵ − 1), :10-11), applied after the coupling (:76-78), log|J| +=
    H·W·Σ log scale (:80-82); `inclad` turns it on."""
    assert get("fastflow").resolve(preset="inclad")["global_affine"] is True
    gen = torch.Generator().manual_seed(0)
    step = CouplingStep(4, 3, 1.0, clamp=2.0, generator=gen, global_affine=True).double()
    torch.testing.assert_close(step.global_scale, torch.full((1, 4, 1, 1), 2 * math.log(math.exp(5) - 1),
                                                             dtype=torch.float64))
    plain = CouplingStep(4, 3, 1.0, clamp=2.0, generator=torch.Generator().manual_seed(0), global_affine=False)
    plain = plain.double()
    plain.load_state_dict({k: v for k, v in step.state_dict().items() if not k.startswith("global_")})
    x = torch.randn(2, 4, 3, 5, dtype=torch.float64)
    # at initialisation the global affine is the identity, up to the float32 rounding of its parameter (as released)
    torch.testing.assert_close(step(x), plain(x), rtol=1e-6, atol=1e-5)
    with torch.no_grad():
        step.global_scale.normal_()
        step.global_offset.normal_()
    y, log_det = plain(x)  # the coupling, then the global affine
    scale = 0.1 * F.softplus(step.global_scale, beta=0.5)
    z, ours = step(x)
    torch.testing.assert_close(z, y * scale + step.global_offset)
    torch.testing.assert_close(ours, log_det + 3 * 5 * torch.log(scale).sum())
