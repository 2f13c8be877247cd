"""PaSTe: the student is only the stages after the bootstrap layer, fed the teacher's bootstrap output, and
reproduces the teacher's shapes; InCLAD's un-normalised first-layer loss is an option."""

from __future__ import annotations

import pytest
import torch

from bench.features import create_backbone
from bench.models.paste import Student, distances, paste_layers
from bench.models.stfpm import feature_distances


@pytest.mark.parametrize("bootstrap", [0, 1, 2])
def test_student_reproduces_the_teachers_later_stages(bootstrap):
    layers = paste_layers({"bootstrap_layer": bootstrap})
    assert layers[0] == ("stem", "layer1", "layer2")[bootstrap] and layers[-1] == "layer3"
    with torch.no_grad():
        feats = create_backbone("resnet18", "none", layers)(torch.zeros(1, 3, 64, 64))
        student = Student("resnet18", bootstrap).eval()
        out = student(feats[0])
    assert len(student.stages) == 3 - bootstrap
    assert [o.shape for o in out] == [f.shape for f in feats[1:]]


def test_first_layer_normalisation_is_an_option():
    g = torch.Generator().manual_seed(0)
    t = [3 * torch.randn(2, 4, 3, 3, generator=g), torch.randn(2, 4, 2, 2, generator=g)]
    s = [torch.randn(2, 4, 3, 3, generator=g), torch.randn(2, 4, 2, 2, generator=g)]
    normalised, raw = distances(t, s, True), distances(t, s, False)
    torch.testing.assert_close(normalised[0], feature_distances(t, s)[0])
    torch.testing.assert_close(raw[0], (t[0] - s[0]).pow(2).sum(1))
    torch.testing.assert_close(raw[1], normalised[1])
