"""Simulated ``sglang.srt.plugins.hook_registry`` (TEST EQUIPMENT): a minimal hook registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar


class HookRegistry:
    _hooks: ClassVar[list[Callable[[], None]]] = []
    _applied: ClassVar[bool] = False

    @classmethod
    def register(cls, hook: Callable[[], None]) -> None:
        cls._hooks.append(hook)

    @classmethod
    def apply_hooks(cls) -> None:
        if cls._applied:
            return
        cls._applied = True
        for hook in cls._hooks:
            hook()
