"""The `bench tabular` options, each built from where its value lives (one CLI dialect with `bench run`).

A run setting comes from its `bench.config.setting` field (`add_setting_options`: type, range, choices, help with
the default), a preprocessing or discovery value from its dataclass field or its `ParamTable` parameter, a
generator's size from its function's signature, a detector name from the registry. Each option built here records
where its default and choices come from (`action.source`, `action.choices_source`: (owner, name)), so a test can
check every option against its owner without a hand list (tests/tabular/test_tabular_cli.py).

Choices that need a heavy import (the tabular detectors import torch, the protocols the training engine) are
`LazyChoices`: loaded when argparse checks a value or prints help, not when the parser is built (every command
builds it, `python -m bench run` too).
"""

from __future__ import annotations

import inspect
from dataclasses import MISSING, fields

from bench.config import add_setting_options, option_name


class LazyChoices:
    """argparse choices computed on first use: `in` (argparse's check) and iteration (help, error messages)."""

    def __init__(self, load, source: tuple):
        self._load, self._values = load, None
        self.source = source  # (owner, name) of the values: ("registry", track) or (module name, attribute)

    def values(self) -> tuple:
        if self._values is None:
            self._values = tuple(self._load())
        return self._values

    def __contains__(self, value) -> bool:
        return value in self.values()

    def __iter__(self):
        return iter(self.values())

    def __len__(self) -> int:
        return len(self.values())


def registry_choices(track: str) -> LazyChoices:
    """The detectors of `track` (bench.registry.names): built-ins and plugins, in the registry's order, named without
    importing a plugin: a command imports only the one it runs (`get`)."""

    def load():
        from bench.registry import names

        return names(track)

    return LazyChoices(load, ("registry", track))


def run_protocol_choices() -> LazyChoices:
    """What `bench tabular run` may name: the tabular protocols make_protocol builds (ste is `bench tabular ste`)."""

    def load():
        from bench.tabular.protocols import PROTOCOLS

        return PROTOCOLS

    return LazyChoices(load, ("bench.tabular.protocols", "PROTOCOLS"))


def last_action(parser):
    """The option just added to `parser` (to record where its default and choices come from)."""
    return parser._actions[-1]


def setting(parser, cls, name: str, **overrides):
    """`--<name>` of the `setting` field `name` of `cls` (bench.config.add_setting_options)."""
    if isinstance(overrides.get("choices"), LazyChoices):  # argparse would list them at once as the metavar
        overrides.setdefault("metavar", "NAME")
    add_setting_options(parser, cls, (name,), **{name: overrides} if overrides else {})
    action = last_action(parser)
    action.source = (cls, name)
    if isinstance(action.choices, LazyChoices):
        action.choices_source = action.choices.source
    elif action.choices is not None:
        action.choices_source = (cls, name)
    return action


def field_option(parser, cls, name: str, help: str, **kwargs):
    """`--<name>` of a plain dataclass field: its default (and type), `help` with "(default: ...)" appended; a
    bool field is a flag (store_true, so its default must be False)."""
    item = next(f for f in fields(cls) if f.name == name)
    default = item.default
    if default is MISSING:
        raise RuntimeError(f"{cls.__name__}.{name} has no default to build an option from")
    if isinstance(default, bool):
        if default:
            raise RuntimeError(f"{cls.__name__}.{name} defaults to true: a store_true flag cannot turn it off")
        parser.add_argument(option_name(name), action="store_true", help=help, **kwargs)
    else:
        kwargs.setdefault("type", type(default))
        parser.add_argument(option_name(name), default=default, help=f"{help} (default: {default})", **kwargs)
    action = last_action(parser)
    action.source = (cls, name)
    return action


def parameter_option(parser, func, name: str, help: str, flag: str | None = None, **kwargs):
    """`--<flag or name>` of keyword parameter `name` of `func`: its default (and type)."""
    default = inspect.signature(func).parameters[name].default
    if default is inspect.Parameter.empty:
        raise RuntimeError(f"{func.__name__}({name}) has no default to build an option from")
    kwargs.setdefault("metavar", "N" if type(default) is int else None)
    parser.add_argument(flag or option_name(name), dest=name, type=type(default), default=default,
                        help=f"{help} (default: {default})", **kwargs)
    action = last_action(parser)
    action.source = (func, name)
    return action


def table_option(parser, table, name: str, presets_help: str):
    """`--<name>` of the `ParamTable` parameter `name`: default None, the framework preset's value (which the command
    resolves through `table.resolve`, typed and ranged there); the help states each preset's value."""
    param = table.params[name]
    values = ", ".join(f"{p} {table.resolve(preset=p)[name]}" for p in table.presets)
    parser.add_argument(option_name(name), type={"int": int, "float": float}.get(param.kind, str), default=None,
                        metavar="N" if param.kind == "int" else None,
                        help=f"{param.doc} (default: {presets_help}: {values})")
    action = last_action(parser)
    action.source = (table, name)
    return action


def preset_option(parser, table, help: str, *others):
    """--framework-preset: a preset of `table` (and of every table in `others`, which must name the same presets);
    default None, the table's default preset, resolved where the preset is applied."""
    names = tuple(table.presets)
    for other in others:
        if tuple(other.presets) != names:
            raise RuntimeError(f"{other.name} presets {tuple(other.presets)} differ from {table.name}'s {names}")
    parser.add_argument("--framework-preset", choices=names, default=None,
                        help=f"{help} (default: {table.default_preset})")
    action = last_action(parser)
    action.source = (table, None)
    action.choices_source = (table, None)
    return action


def model_list(track: str):
    """A --models value: comma-separated registered detectors of `track`, as a tuple (argparse: one line, exit 2)."""
    import argparse

    choices = registry_choices(track)

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(m.strip() for m in text.split(",") if m.strip())
        unknown = [m for m in names if m not in choices]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"unknown {track} model(s) {', '.join(unknown) or repr(text)} (valid: "
                                             f"{', '.join(choices)})")
        return names

    parse.choices = choices
    return parse


def model_option(parser, track: str, help: str, **kwargs):
    """--model: a registered detector of `track`; the help lists them when printed (argparse's %(choices)s)."""
    parser.add_argument("--model", choices=registry_choices(track), metavar="NAME",
                        help=f"{help}: %(choices)s", **kwargs)
    action = last_action(parser)
    action.choices_source = action.choices.source
    return action
