"""PaSTe side by side: the suite's `inclad` PaSTe and InCLAD's released one (InCLAD-benchmark
`src/pyclad/models/paste/{architecture.py,standard/backbones.py}`), bootstrap layer 0.

Same weights: the released teacher and student get the suite's (copied in registration order: the released
student's stages are layers 1-3, the suite's the stem's max-pool + layer 1, layers 2, 3); both take one SGD step
(Table 7: lr 0.4, momentum 0.9, weight decay 1e-4, over the student) on the same batch, then `--steps` more;
printed: the first loss (the released `feature_loss`, first layer un-normalised), the student after one step,
the image scores and maps (released `post_process`; the suite's map carries ½ per layer: × 8).
"""

from __future__ import annotations

import torch

from harness import Report, arguments, copy_by_order, descend, lockstep, max_gap, roc_auc, state_gap, \
    suite_detector, tiny_task, use_released


def released_arch(size: int):
    from pyclad.models.paste.architecture import PaSTeArchitecture

    return PaSTeArchitecture("resnet18", None, 0, pretrained_teacher=False, pretrained_student=False,
                             freeze_teacher=True, input_size=(size, size))


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    use_released(args.released, "InCLAD-benchmark")
    train, test = tiny_task(args.size)
    report = Report("paste")
    det = suite_detector("paste", args.size, seed=0)
    det._lay_out_modules()
    arch = released_arch(args.size)
    copy_by_order(det.extractor.model.state_dict(), [arch.teacher])
    copy_by_order(det.student_.state_dict(), [arch.student])
    optimizer = torch.optim.SGD(arch.student.parameters(), lr=0.4, momentum=0.9, weight_decay=1e-4)

    def released_step(images):
        arch.train()
        loss = arch.feature_loss(*arch.forward_train(images))
        return descend(optimizer, loss)

    def first(step):
        if step.index == 0:
            report.row("loss of the first step", step.suite, step.released, abs(step.suite - step.released))
            released = arch.student.state_dict()
            gap, _ = state_gap(dict(zip(released, det.student_.state_dict().values())), released)
            report.row("student after one step", "", "", gap)

    last = lockstep(det, det.student_, train, 1 + args.steps, released_step, first)
    report.row(f"loss of step {1 + args.steps}", last.suite, last.released, abs(last.suite - last.released))
    idx = list(range(len(test)))
    pred = det.predict(test, idx)
    arch.eval()
    with torch.no_grad():
        maps, scores = arch(test.load_images(idx))
    report.row("image scores (suite × 8: ½ per layer)", float(pred.scores.max() * 8), float(scores.max()),
               max_gap(pred.scores * 8, scores))
    report.row("pixel maps, max |Δ| / max", "", "", max_gap(pred.maps * 8, maps) / float(maps.max()))
    report.row("image ROC-AUC", roc_auc(pred.scores, test.labels), roc_auc(scores.numpy(), test.labels))
    report.print()


if __name__ == "__main__":
    main()
