"""The built-in synthetic industrial benchmark, written in the MVTec AD layout (`read_index("synthetic", root)`).

Each task is one product: a texture (stripes, checker, grain, ...) or an object on a plain background (disc,
chip, ...), with per-image pose, phase, colour and lighting jitter so no two normal images are alike. Anomalous
test images carry one defect (scratch, stain, hole, contamination) with its pixel mask. Defects are large
(>= ~2% of the image) and high contrast, so that even a nearest-neighbour patch detector on randomly initialised
features separates them: the benchmark exercises the continual-learning machinery, not the backbone.

Every image draws from its own numpy Generator seeded by (seed, task, split, image), so a generation is
byte-identical for the same parameters, and a task's images do not depend on how many tasks are generated.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from bench.errors import ConfigError, DatasetError, choice_error

GENERATOR_VERSION = 2  # bump when the images change, so existing generations are rewritten
# (2: the images once changed while the version stayed 1; 2 rewrites any generation from before that change)
DEFECT_KINDS = ("scratch", "stain", "hole", "contamination")
OVERRIDABLE = ("n_tasks", "image_size", "n_train", "n_test")

# visa-scale mirrors VisA: 12 tasks, 8,664 train / 2,160 test images (1,200 anomalous) vs. VisA's 8,659 / 2,162.
PRESETS: dict[str, dict] = {
    "tiny": {"n_tasks": 5, "image_size": 64, "n_train": 16, "n_test": 16, "anomaly_fraction": 0.5},
    "demo": {"n_tasks": 6, "image_size": 96, "n_train": 40, "n_test": 30, "anomaly_fraction": 0.5},
    "visa-scale": {"n_tasks": 12, "image_size": 224, "n_train": 722, "n_test": 180, "anomaly_fraction": 5 / 9},
}

# (name, family, palette RGB, the family's scale as a fraction of the image side: period, cell, radius...).
# The order mixes textures and objects so that every preset's first tasks (tiny: 5, demo: 6) contain both.
TASKS = (
    ("stripes", "stripes", ((205, 205, 210), (55, 60, 70)), 0.125),
    ("checker", "checker", ((235, 225, 200), (125, 60, 40)), 0.2),
    ("disc", "disc", ((70, 85, 75), (225, 215, 190), (150, 140, 120)), 0.3),
    ("grain", "grain", ((85, 105, 140), (175, 195, 215)), 0.5),
    ("chip", "chip", ((30, 110, 60), (40, 40, 45), (200, 200, 205)), 0.25),
    ("dots", "dots", ((40, 40, 120), (230, 200, 60)), 0.18),
    ("rings", "rings", ((205, 155, 95), (120, 70, 30)), 0.09),
    ("capsule", "capsule", ((230, 230, 235), (200, 45, 40), (235, 195, 45)), 0.16),
    ("weave", "weave", ((55, 125, 165), (20, 60, 90)), 0.2),
    ("nut", "nut", ((65, 55, 50), (170, 175, 180)), 0.3),
    ("tiles", "tiles", ((175, 75, 50), (215, 210, 200)), 0.16),
    ("marble", "marble", ((238, 236, 230), (95, 95, 105)), 0.25),
)
OBJECT_FAMILIES = frozenset({"disc", "chip", "capsule", "nut"})

# Stain and contamination colours are picked per task from these: the two farthest, in colour and brightness,
# from the task's palette.
_DEFECT_CANDIDATES = np.array([(230, 30, 30), (30, 200, 40), (30, 60, 230), (220, 40, 220), (30, 210, 220),
                               (240, 220, 30), (250, 130, 20)], dtype=np.float32) / 255


def generate(root, preset: str = "demo", seed: int = 0, **overrides) -> Path:
    """Write the benchmark under `root` (MVTec AD layout + `synthetic.json`) and return `root`.

    `overrides` may set n_tasks, image_size, n_train, n_test. An identical complete generation already at `root`
    is kept as is; otherwise the tree is built in a sibling temp folder and swapped in, so a killed generation
    never leaves a half-written tree behind.
    """
    params = _params(preset, seed, overrides)
    root = Path(root).expanduser()
    if _is_complete(root, params):
        return root
    if root.exists() and not root.is_dir():
        raise DatasetError(f"{root}: exists and is not a directory (expected a folder for the synthetic benchmark)")
    if root.is_dir() and any(root.iterdir()) and not (root / "synthetic.json").is_file():
        raise DatasetError(f"{root}: not empty and not a synthetic benchmark; refusing to overwrite it")
    root.parent.mkdir(parents=True, exist_ok=True)
    _remove_orphans(root)
    tmp = root.parent / f".{root.name}.tmp-{_owner()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        _write_tree(tmp, params)
        if _is_complete(root, params):  # a concurrent job finished the same generation first
            shutil.rmtree(tmp)
            return root
        _swap_in(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root


def _params(preset: str, seed: int, overrides: dict) -> dict:
    if preset not in PRESETS:
        raise choice_error("preset", preset, PRESETS)
    for key in overrides:
        if key not in OVERRIDABLE:
            raise choice_error("synthetic override", key, OVERRIDABLE)
    params = {"version": GENERATOR_VERSION, "preset": preset, "seed": seed, **PRESETS[preset], **overrides}
    if not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"synthetic seed must be a non-negative integer, got {seed!r}")
    if not 1 <= params["n_tasks"] <= len(TASKS):
        raise ConfigError(f"synthetic n_tasks must be in 1..{len(TASKS)}, got {params['n_tasks']}")
    if params["image_size"] < 32 or params["n_train"] < 1 or params["n_test"] < 2:
        raise ConfigError(f"synthetic needs image_size >= 32, n_train >= 1, n_test >= 2, got {params}")
    # At least one normal and one anomalous test image, so every task's ROC-AUC is defined.
    n_anomalous = round(params.pop("anomaly_fraction") * params["n_test"])
    params["n_anomalous"] = min(max(n_anomalous, 1), params["n_test"] - 1)
    return params


def _is_complete(root: Path, params: dict) -> bool:
    """`synthetic.json` is written last, so its presence with equal parameters means a complete generation."""
    try:
        return json.loads((root / "synthetic.json").read_text())["params"] == params
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _host() -> str:
    """This host's name without '-', the separator of temp-tree names."""
    return socket.gethostname().replace("-", "_")


def _owner() -> str:
    """`<host>-<pid>` of this process, in the name of its temp trees: which host's process made a tree, so that
    only that host decides whether it is an orphan (datasets live on file systems shared by many nodes)."""
    return f"{_host()}-{os.getpid()}"


def _remove_orphans(root: Path) -> None:
    """Delete temp trees next to `root` left by a generation on this host whose process is gone (SIGKILL, OOM,
    node reboot skip the cleanup in `generate`). Trees of live processes and of other hosts are left alone."""
    host = _host()
    for path in root.parent.glob(f".{root.name}.*-{host}-*-*"):
        kind, _, rest = path.name[len(root.name) + 2:].partition("-")
        pid = rest[len(host) + 1:].split("-")[0]
        if kind not in ("tmp", "old") or not rest.startswith(host + "-") or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:  # alive, someone else's
            pass


def _swap_in(tmp: Path, root: Path) -> None:
    # A directory cannot be renamed over a non-empty one: move the old tree aside first, then drop it.
    old = None
    if root.exists():
        old = root.parent / f".{root.name}.old-{_owner()}-{secrets.token_hex(4)}"
        os.replace(root, old)
    os.replace(tmp, root)
    if old is not None:
        shutil.rmtree(old)


def _write_tree(out: Path, params: dict) -> None:
    size, seed = params["image_size"], params["seed"]
    n_good = params["n_test"] - params["n_anomalous"]
    width = max(3, len(str(max(params["n_train"], params["n_test"]) - 1)))
    tasks_meta = []
    for t, (name, family, palette, scale) in enumerate(TASKS[: params["n_tasks"]]):
        palette = np.array(palette, dtype=np.float32) / 255
        colours = _defect_colours(palette)
        task_dir = out / name
        for i in range(params["n_train"]):
            rng = np.random.default_rng([seed, t, 0, i])
            image, _ = _render(rng, family, palette, scale, size)
            _save(_finish(rng, image), task_dir / "train" / "good" / f"{i:0{width}d}.png")
        for i in range(n_good):
            rng = np.random.default_rng([seed, t, 1, i])
            image, _ = _render(rng, family, palette, scale, size)
            _save(_finish(rng, image), task_dir / "test" / "good" / f"{i:0{width}d}.png")
        contrasts, areas, counts = [], [], dict.fromkeys(DEFECT_KINDS, 0)
        for i in range(params["n_anomalous"]):
            kind = DEFECT_KINDS[i % len(DEFECT_KINDS)]
            rng = np.random.default_rng([seed, t, 2, i])
            clean, region = _render(rng, family, palette, scale, size)
            image, mask = _add_defect(rng, clean, region, kind, colours)
            contrasts.append(float(np.linalg.norm(image - clean, axis=2)[mask].mean()))
            areas.append(float(mask.mean()))
            stem = f"{counts[kind]:0{width}d}"
            counts[kind] += 1
            _save(_finish(rng, image), task_dir / "test" / kind / f"{stem}.png")
            _save(mask.astype(np.float32), task_dir / "ground_truth" / kind / f"{stem}_mask.png")
        tasks_meta.append({
            "name": name, "family": family, "kind": "object" if family in OBJECT_FAMILIES else "texture",
            "n_train": params["n_train"], "n_test_good": n_good, "n_test_anomalous": params["n_anomalous"],
            "defects": counts,
            # RGB distance (0..1 per channel) between the defective and the clean image inside the mask.
            "defect_contrast": {"mean": round(float(np.mean(contrasts)), 4), "min": round(min(contrasts), 4)},
            "defect_area_fraction": {"mean": round(float(np.mean(areas)), 4), "min": round(min(areas), 4)},
        })
    meta = {"generator": "bench.data.synthetic", "params": params, "layout": "mvtec",
            "defect_kinds": list(DEFECT_KINDS), "tasks": tasks_meta}
    (out / "synthetic.json").write_text(json.dumps(meta, indent=2) + "\n")


def _save(array: np.ndarray, path: Path) -> None:
    """[H,W,3] -> RGB PNG, [H,W] -> greyscale PNG; values in [0,1]."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.clip(np.rint(array * 255), 0, 255).astype(np.uint8)
    # Sensor noise makes these images hard to compress: level 1 saves ~a quarter of the time for ~15% more bytes.
    Image.fromarray(pixels).save(path, format="PNG", compress_level=1)


# --- normal appearance -------------------------------------------------------------------------------------------


def _render(rng, family: str, palette: np.ndarray, scale: float, size: int):
    """A clean image [S,S,3] in [0,1] and the region where defects may sit (the object, or everywhere)."""
    c = np.arange(size, dtype=np.float32) + 0.5
    x, y = np.meshgrid(c, c)
    return _FAMILIES[family](rng, x, y, size, palette, scale)


def _finish(rng, image: np.ndarray) -> np.ndarray:
    """Per-image gain, colour cast, lighting gradient and sensor noise: what makes normal images differ."""
    size = image.shape[0]
    c = (np.arange(size, dtype=np.float32) + 0.5) / size - 0.5
    phi = rng.uniform(0, 2 * np.pi)
    light = 1 + rng.uniform(0, 0.08) * (np.cos(phi) * c[None, :] + np.sin(phi) * c[:, None])
    gain, cast = np.float32(rng.uniform(0.96, 1.04)), rng.normal(0, 0.015, 3).astype(np.float32)
    image = image * gain * light[..., None] + cast
    return np.clip(image + 0.012 * rng.standard_normal(image.shape, dtype=np.float32), 0, 1)


def _mix(c0, c1, v):
    return c0 + (c1 - c0) * np.clip(v, 0, 1)[..., None]


def _rotate(x, y, cx, cy, theta):
    cos, sin = np.cos(theta), np.sin(theta)
    return (x - cx) * cos + (y - cy) * sin, -(x - cx) * sin + (y - cy) * cos


def _noise(rng, size: int, cells_y: int, cells_x: int) -> np.ndarray:
    """Smooth value noise in ~[0,1]: a coarse random grid, bicubically upsampled."""
    coarse = Image.fromarray(rng.random((cells_y, cells_x), dtype=np.float32))
    return np.asarray(coarse.resize((size, size), Image.BICUBIC), dtype=np.float32)


def _cover(distance):
    """Anti-aliased coverage of a shape from its signed distance in pixels (negative inside)."""
    return np.clip(0.5 - distance, 0, 1)


def _everywhere(size):
    return np.ones((size, size), dtype=bool)


def _stripes(rng, x, y, size, pal, scale):
    theta = np.deg2rad(30 + rng.uniform(-4, 4))
    period = scale * size * rng.uniform(0.95, 1.05)
    v = 0.5 + 0.5 * np.sin(2 * np.pi * (x * np.cos(theta) + y * np.sin(theta)) / period + rng.uniform(0, 2 * np.pi))
    return _mix(pal[0], pal[1], v), _everywhere(size)


def _checker(rng, x, y, size, pal, scale):
    cell = scale * size * rng.uniform(0.97, 1.03)
    a, b = _rotate(x, y, *rng.uniform(0, 2 * cell, 2), np.deg2rad(rng.uniform(-3, 3)))
    # Anti-aliased: +-1 per axis with a one-pixel ramp at cell edges; the product alternates like a checkerboard.
    sa, sb = (np.sign(np.mod(t, 2 * cell) - cell) * np.clip(cell / 2 - np.abs(np.mod(t, cell) - cell / 2), 0, 0.5) * 2
              for t in (a, b))
    return _mix(pal[0], pal[1], 0.5 + 0.5 * sa * sb), _everywhere(size)


def _grain(rng, x, y, size, pal, scale):
    # Brushed metal: noise that varies fast across rows and slowly along them gives horizontal streaks.
    streaks = _noise(rng, size, max(8, round(scale * size)), 3)
    fine = _noise(rng, size, size // 4, size // 4)
    v = (0.65 * streaks + 0.35 * fine - 0.5) * 1.8 + 0.5
    return _mix(pal[0], pal[1], v), _everywhere(size)


def _dots(rng, x, y, size, pal, scale):
    # Hexagonal dot grid = two rectangular grids, the second offset by half a cell in both directions.
    d = scale * size * rng.uniform(0.97, 1.03)
    h = d * np.sqrt(3)
    ox, oy = rng.uniform(0, d), rng.uniform(0, h)
    dist = np.full(x.shape, np.inf, dtype=np.float32)
    for sx, sy in ((0, 0), (d / 2, h / 2)):
        dx = np.mod(x - ox - sx, d) - d / 2
        dy = np.mod(y - oy - sy, h) - h / 2
        dist = np.minimum(dist, np.hypot(dx, dy))
    return _mix(pal[0], pal[1], _cover(dist - 0.3 * d)), _everywhere(size)


def _rings(rng, x, y, size, pal, scale):
    # Wood: rings around a centre far off to the left, bent by smooth noise.
    cx, cy = rng.uniform(-1.0, -0.6) * size, rng.uniform(0.2, 0.8) * size
    r = np.hypot(x - cx, y - cy) + 0.6 * scale * size * _noise(rng, size, 4, 4)
    v = (0.5 + 0.5 * np.sin(2 * np.pi * r / (scale * size * rng.uniform(0.95, 1.05)))) ** 2
    return _mix(pal[0], pal[1], v), _everywhere(size)


def _weave(rng, x, y, size, pal, scale):
    # Basket weave: cells alternate between horizontal and vertical threads.
    cell = scale * size * rng.uniform(0.97, 1.03)
    ox, oy = rng.uniform(0, 2 * cell, 2)
    a, b = x - ox, y - oy
    parity = (np.floor(a / cell) + np.floor(b / cell)) % 2
    thread = cell / 3
    v = np.where(parity == 0, np.abs(np.sin(np.pi * b / thread)), np.abs(np.sin(np.pi * a / thread)))
    return _mix(pal[1], pal[0], v ** 0.7), _everywhere(size)


def _tiles(rng, x, y, size, pal, scale):
    # Bricks twice as wide as tall, every other row offset by half a brick, each brick its own shade.
    hgt = scale * size * rng.uniform(0.97, 1.03)
    ox, oy = rng.uniform(0, 2 * hgt, 2)
    row = np.floor((y - oy) / hgt)
    a = x - ox + (row % 2) * hgt
    col = np.floor(a / (2 * hgt))
    shade = rng.normal(0, 0.05, (64, 64)).astype(np.float32)[row.astype(int) % 64, col.astype(int) % 64]
    mortar_dist = np.minimum(np.abs(np.mod(y - oy + hgt / 2, hgt) - hgt / 2),
                             np.abs(np.mod(a + hgt, 2 * hgt) - hgt))
    brick = pal[0] * (1 + shade[..., None])
    return _mix(brick, pal[1], _cover(mortar_dist - 0.1 * hgt)), _everywhere(size)


def _marble(rng, x, y, size, pal, scale):
    theta = rng.uniform(0, np.pi)
    u = (x * np.cos(theta) + y * np.sin(theta)) / (scale * size)
    veins = np.abs(np.sin(np.pi * u + 5 * _noise(rng, size, 5, 5)))
    return _mix(pal[1], pal[0], veins ** 0.35), _everywhere(size)


def _disc(rng, x, y, size, pal, scale):
    cx, cy = size / 2 + rng.uniform(-0.06, 0.06, 2) * size
    radius = scale * size * rng.uniform(0.97, 1.03)
    d = np.hypot(x - cx, y - cy)
    body = pal[1] * (1 - 0.2 * (d / radius) ** 2)[..., None]
    body = _mix(body, pal[2], _cover(radius * 0.9 - d))  # a raised rim just inside the edge
    return _mix(pal[0], body, _cover(d - radius)), d < 0.75 * radius


def _chip(rng, x, y, size, pal, scale):
    cx, cy = size / 2 + rng.uniform(-0.05, 0.05, 2) * size
    half = scale * size * rng.uniform(0.98, 1.02)
    a, b = _rotate(x, y, cx, cy, np.deg2rad(rng.uniform(-8, 8)))
    q = np.maximum(np.abs(a), np.abs(b)) - half
    pitch = half / 3
    pins = (np.abs(b) < half * 0.95) & (np.abs(a) > half) & (np.abs(a) < half * 1.3) \
        & (np.mod(b + half, pitch) < pitch * 0.55)
    image = _mix(pal[0], pal[2], pins.astype(np.float32))
    return _mix(image, pal[1], _cover(q)), q < -0.2 * half


def _capsule(rng, x, y, size, pal, scale):
    cx, cy = size / 2 + rng.uniform(-0.05, 0.05, 2) * size
    radius = scale * size * rng.uniform(0.97, 1.03)
    a, b = _rotate(x, y, cx, cy, np.deg2rad(rng.uniform(-10, 10)))
    d = np.hypot(np.maximum(np.abs(a) - 1.4 * radius, 0), b) - radius
    halves = _mix(pal[1], pal[2], (a > 0).astype(np.float32)) * (1 - 0.25 * (b / radius) ** 2)[..., None]
    return _mix(pal[0], halves, _cover(d)), d < -0.3 * radius


def _nut(rng, x, y, size, pal, scale):
    cx, cy = size / 2 + rng.uniform(-0.05, 0.05, 2) * size
    apothem = scale * size * rng.uniform(0.97, 1.03)
    theta = np.deg2rad(rng.uniform(-15, 15))
    hexagon = np.max([np.abs((x - cx) * np.cos(theta + k * np.pi / 3) + (y - cy) * np.sin(theta + k * np.pi / 3))
                      for k in range(3)], axis=0) - apothem
    r = np.hypot(x - cx, y - cy)
    hole = 0.42 * apothem - r
    metal = pal[1] * (1 + 0.12 * ((x - cx) - (y - cy)) / apothem)[..., None]
    image = _mix(pal[0], metal, _cover(np.maximum(hexagon, hole)))
    return image, (hexagon < -0.1 * apothem) & (r > 0.55 * apothem)


_FAMILIES = {"stripes": _stripes, "checker": _checker, "grain": _grain, "dots": _dots, "rings": _rings,
             "weave": _weave, "tiles": _tiles, "marble": _marble, "disc": _disc, "chip": _chip,
             "capsule": _capsule, "nut": _nut}


# --- defects -----------------------------------------------------------------------------------------------------


def _defect_colours(palette: np.ndarray) -> dict:
    """High-contrast colours for a task: stain/contamination colours far from every palette colour, and black or
    white (whichever is farther from the palette's mean) for scratches and holes."""
    # Distance plus luminance difference: a stain as dark as the texture's dark parts reads as texture to random
    # features even when its hue differs.
    luma = np.array([0.299, 0.587, 0.114], dtype=np.float32)
    distance = np.linalg.norm(_DEFECT_CANDIDATES[:, None] - palette[None], axis=2)
    luma_gap = np.abs((_DEFECT_CANDIDATES @ luma)[:, None] - (palette @ luma)[None])
    score = distance.min(axis=1) + 2 * luma_gap.min(axis=1)
    first, second = np.argsort(-score, kind="stable")[:2]
    mean = palette.mean(axis=0)
    extreme = np.zeros(3, np.float32) if np.linalg.norm(mean) > np.linalg.norm(1 - mean) else np.ones(3, np.float32)
    return {"stain": _DEFECT_CANDIDATES[first], "foreign": _DEFECT_CANDIDATES[second], "extreme": extreme}


def _add_defect(rng, clean: np.ndarray, region: np.ndarray, kind: str, colours: dict):
    """The image with one defect of `kind`, and its boolean mask."""
    size = clean.shape[0]
    image = clean.copy()
    if kind == "scratch":
        mask = _scratch_mask(rng, region, size)
        image[mask] = colours["extreme"]
        return image, mask
    # An irregular blob of radius 0.12-0.16 (up to 0.21 with the wobble) of the side: 4-8% of the image, inside it.
    cx, cy = _centre(rng, region, size, margin=0.21)
    c = np.arange(size, dtype=np.float32) + 0.5
    x, y = np.meshgrid(c, c)
    angle = np.arctan2(y - cy, x - cx)
    phase = rng.uniform(0, 2 * np.pi, 2)
    wobble = 1 + 0.2 * np.sin(2 * angle + phase[0]) + 0.1 * np.sin(3 * angle + phase[1])
    mask = np.hypot(x - cx, y - cy) < rng.uniform(0.12, 0.16) * size * wobble
    if kind == "stain":
        image[mask] = 0.1 * clean[mask] + 0.9 * colours["stain"]
    elif kind == "hole":
        image[mask] = colours["extreme"]
    else:  # contamination: a foreign two-colour speckle texture
        cells = max(2, size // 32)
        speckle = rng.random((size // cells + 1, size // cells + 1)) > 0.5
        speckle = np.kron(speckle, np.ones((cells, cells)))[:size, :size]
        image[mask] = _mix(colours["foreign"], colours["extreme"], speckle.astype(np.float32))[mask]
    return image, mask


def _scratch_mask(rng, region, size: int) -> np.ndarray:
    """A slightly bent line, at least ~2% of the image: width ~4% of the side, length half the side or more."""
    cx, cy = _centre(rng, region, size, margin=0.32)
    theta = rng.uniform(0, np.pi)
    half = rng.uniform(0.25, 0.32) * size
    bend = rng.uniform(-0.08, 0.08) * size
    direction, normal = np.array([np.cos(theta), np.sin(theta)]), np.array([-np.sin(theta), np.cos(theta)])
    p0, p1 = np.array([cx, cy]) - half * direction, np.array([cx, cy]) + half * direction
    ctrl = np.array([cx, cy]) + 2 * bend * normal
    t = np.linspace(0, 1, 33)[:, None]
    points = (1 - t) ** 2 * p0 + 2 * (1 - t) * t * ctrl + t ** 2 * p1  # quadratic Bezier
    canvas = Image.new("L", (size, size), 0)
    ImageDraw.Draw(canvas).line([tuple(p) for p in points], fill=255, width=max(3, round(0.04 * size)), joint="curve")
    return np.asarray(canvas) > 0


def _centre(rng, region: np.ndarray, size: int, margin: float) -> tuple[float, float]:
    """A random point of `region` at least `margin` * size from the border (the image centre if none)."""
    lo, hi = int(margin * size), int(np.ceil((1 - margin) * size))
    inner = np.zeros_like(region)
    inner[lo:hi, lo:hi] = region[lo:hi, lo:hi]
    candidates = np.flatnonzero(inner)
    if candidates.size == 0:
        return size / 2, size / 2
    row, col = divmod(int(candidates[rng.integers(candidates.size)]), size)
    return col + 0.5, row + 0.5
