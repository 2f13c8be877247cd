"""RD4AD side by side with anomalib's ReverseDistillationModel (docs/models.md, RD4AD). Not part of the
suite: it needs anomalib, which the project does not depend on. Run it in a separate venv that has anomalib and
this project's requirements (never the project's venv):

    PYTHONPATH=.:tests python tests/rd4ad_vs_anomalib.py ROOT clouds 128 16 3,10

ROOT: an MVTec-layout folder from tests/textures.py `generate`. Both sides get the same encoder (our seeded
random-init resnet18 loaded into anomalib's timm extractor) and the same start weights (anomalib's initialised
bottleneck and decoder copied into ours), so any difference is the method: printed are the encoder, loss and
gradient differences on one batch, then per epoch count both training curves and both image AUROCs.
"""

import sys

import numpy as np
import torch
from anomalib.models.components import GaussianBlur2d
from anomalib.models.image.reverse_distillation.loss import ReverseDistillationLoss
from anomalib.models.image.reverse_distillation.torch_model import ReverseDistillationModel
from textures import splits

from bench.features import FeatureExtractor
from bench.metrics import roc_auc
from helpers import create
from bench.models.rd4ad import cosine_loss, cosine_map

LAYERS = ("layer1", "layer2", "layer3")
OCBE = {"conv1": "down1.0.0", "bn1": "down1.0.1", "conv2": "down1.1.0", "bn2": "down1.1.1", "conv3": "down2.0",
        "bn3": "down2.1"}
BLOCK = {"conv1": "body.0", "bn1": "body.1", "conv2": "body.3", "bn2": "body.4", "upsample": "skip"}


def our_name(key: str) -> str | None:
    """Our ReverseDistillation key of an anomalib bottleneck/decoder key (None: anomalib's unused conv4/bn4)."""
    part, _, rest = key.partition(".")
    head, _, tail = rest.partition(".")
    if part == "bottleneck":
        return f"bottleneck.{OCBE[head]}.{tail}" if head in OCBE else (
            f"bottleneck.oce.{tail}" if head == "bn_layer" else None)
    if part == "decoder":  # layerK.j.name.rest
        block, name, param = tail.split(".", 2)
        return f"decoder.stages.{int(head[-1]) - 1}.{block}.{BLOCK[name]}.{param}"
    return None


def pair(size: int, epochs: int, batch_size: int):
    """(extractor, our detector, anomalib model) with the same encoder and the same start weights."""
    ext = FeatureExtractor("resnet18", "none", LAYERS, torch.device("cpu"), batch_size=8, progress=False)
    det = create("rd4ad", ext, size, epochs=epochs, batch_size=batch_size)
    det.build(0)
    ano = ReverseDistillationModel("resnet18", (size, size), list(LAYERS), "add", pre_trained=False)
    ano.encoder.feature_extractor.load_state_dict(ext.model.state_dict())
    names = {k: our_name(k) for k in ano.state_dict() if our_name(k)}
    if set(names.values()) != set(det.net_.state_dict()):
        raise SystemExit("the two modules no longer map 1:1")
    det.net_.load_state_dict({ours: ano.state_dict()[k] for k, ours in names.items()})
    return ext, det, ano


def compare_one_batch(train, size: int, batch_size: int) -> None:
    ext, det, ano = pair(size, 1, batch_size)
    x = train.load_images(np.arange(min(batch_size, len(train))))
    det.net_.train()
    ano.train()  # anomalib's forward puts its encoder back in eval mode itself
    with torch.no_grad():
        ours_feats = ext.model(x)
    ours_loss = cosine_loss(ours_feats, det.net_(ours_feats))
    ours_loss.backward()
    enc, dec = ano(x)
    ano_loss = ReverseDistillationLoss()(enc, dec)
    ano_loss.backward()
    params = dict(det.net_.named_parameters())
    grad_diff = max(float((p.grad - params[our_name(k)].grad).abs().max())
                    for k, p in ano.named_parameters() if our_name(k) and p.grad is not None)
    print("encoder max|diff|", [float((a - b).abs().max()) for a, b in zip(ours_feats, enc)])
    print("decoder shapes", [tuple(d.shape) for d in dec])
    print(f"loss at init: ours {ours_loss.item():.6f}, anomalib {ano_loss.item():.6f}; max|grad diff| {grad_diff:.3g}")


def train_anomalib(ano, images: torch.Tensor, epochs: int, batch_size: int) -> list[float]:
    """anomalib's training step (its loss, its optimizer settings) in a plain loop over shuffled batches."""
    opt = torch.optim.Adam([*ano.decoder.parameters(), *ano.bottleneck.parameters()], lr=0.005, betas=(0.5, 0.99))
    order = torch.Generator().manual_seed(0)
    curve = []
    for _ in range(epochs):
        ano.train()
        total = 0.0
        for b in torch.randperm(len(images), generator=order).split(batch_size):
            loss = ReverseDistillationLoss()(*ano(images[b]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(b)
        curve.append(round(total / len(images), 4))
    return curve


def max_score(maps: torch.Tensor) -> np.ndarray:
    return maps.flatten(1).max(1).values.numpy()


def main(root: str, task: str, size: int, batch_size: int, epoch_counts: list[int]) -> None:
    torch.manual_seed(0)  # anomalib's initialisation draws from the global generator: the docs' figures use seed 0
    train, test = splits(root, task, size)
    compare_one_batch(train, size, batch_size)
    blur = GaussianBlur2d(kernel_size=(33, 33), sigma=(4, 4))  # anomalib's map blur
    idx = np.arange(len(test))
    for epochs in epoch_counts:
        ext, det, ano = pair(size, epochs, batch_size)
        det.fit(train, seed=0)
        ano_curve = train_anomalib(ano, train.load_images(np.arange(len(train))), epochs, batch_size)
        ano.eval()
        with torch.no_grad():
            images = test.load_images(idx)
            ano_scores = ano(images).pred_score.flatten().numpy()
            feats = list(ano.encoder(images).values())
            ano_raw = cosine_map(feats, ano.decoder(ano.bottleneck(feats)), size)[:, None]
            ours_feats = ext(test, idx)
            ours_raw = cosine_map(ours_feats, det.net_(ours_feats), size)[:, None]
        y = test.labels
        print(f"{epochs} epochs, batch {batch_size}: ours {roc_auc(y, det.predict(test, idx).scores):.3f} "
              f"(blurred σ 4: {roc_auc(y, max_score(blur(ours_raw))):.3f}); anomalib {roc_auc(y, ano_scores):.3f} "
              f"(unblurred: {roc_auc(y, max_score(ano_raw)):.3f}); losses ours {[round(v, 4) for v in det.losses_]} "
              f"anomalib {ano_curve}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), [int(e) for e in sys.argv[5].split(",")])
