"""Tracers: capture agent activity as spans."""

from .base import Tracer, clear_active_tracer, get_active_tracer, set_active_tracer

__all__ = ["Tracer", "get_active_tracer", "set_active_tracer", "clear_active_tracer"]
