"""Print the pip configuration this machine uses, merged into one file, for the image build to mount.

pip inside `podman/docker build` must reach the same package index as the host (a mirror, local wheel folders,
a private CA), but none of that may be baked into the image. docker/image.sh mounts the merged file read-only at
/etc/pip.conf for the build only, plus every local path it names (wheel folders, file:// indexes, the CA bundle).

    python3 docker/pip_config.py OUT.conf      writes OUT.conf; prints the local paths to mount, one a line
"""

import configparser
import os
import sys
from pathlib import Path

# pip reads these in this order, later ones overriding earlier ones; PIP_* environment variables override all.
FILES = ["/etc/xdg/pip/pip.conf", "/etc/pip.conf", "~/.pip/pip.conf", "~/.config/pip/pip.conf"]
# Environment variables that describe the machine, not the build: the Dockerfile sets its own.
NOT_PASSED = {"PIP_CONFIG_FILE", "PIP_NO_CACHE_DIR", "PIP_DISABLE_PIP_VERSION_CHECK", "PIP_REQUIRE_VIRTUALENV",
              "PIP_USER", "PIP_TARGET", "PIP_PREFIX"}


def merged() -> configparser.ConfigParser:
    conf = configparser.ConfigParser(interpolation=None)
    files = FILES + ([os.environ["PIP_CONFIG_FILE"]] if os.environ.get("PIP_CONFIG_FILE") else [])
    conf.read([os.path.expanduser(f) for f in files])
    if not conf.has_section("global"):
        conf.add_section("global")
    for key, value in sorted(os.environ.items()):
        if key.startswith("PIP_") and key not in NOT_PASSED:
            conf.set("global", key[4:].lower().replace("_", "-"), value)
    return conf


# A local PEP 503 index (<dir>/simple) links its files relatively (../../files/x.whl): mount <dir>, not <dir>/simple.
INDEX_KEYS = {"index-url", "extra-index-url"}


def local_paths(conf: configparser.ConfigParser) -> list[str]:
    """Existing absolute paths named by the configuration (directly or as file:// URLs), as named (a symlinked CA
    bundle must exist at the path pip is given)."""
    paths = set()
    for section in conf.sections():
        for key, value in conf[section].items():
            for word in value.split():
                path = Path(word[len("file://"):] if word.startswith("file://") else word)
                if key in INDEX_KEYS and path.name == "simple":
                    path = path.parent
                if path.is_absolute() and path.exists():
                    paths.add(str(path))
    return sorted(paths)


def main(out: str) -> None:
    conf = merged()
    with open(out, "w") as f:
        conf.write(f)
    print("\n".join(local_paths(conf)))


if __name__ == "__main__":
    main(sys.argv[1])
