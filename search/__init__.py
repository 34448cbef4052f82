"""Where to look and how to walk: knob spaces per operator and target, templates, strategies."""

from .config import Config
from .knobs import ChoiceKnob, Knob, OrderKnob, PlacementKnob, SplitKnob, split_knob
from .space import InvalidConfig, Space
from .targets import TargetInfo, resolve_target
from .template import PackedWeight, Template
from .templates import template_for

__all__ = ["Config", "Knob", "ChoiceKnob", "OrderKnob", "PlacementKnob", "SplitKnob", "split_knob",
           "Space", "InvalidConfig", "Template", "PackedWeight", "template_for", "resolve_target", "TargetInfo"]
