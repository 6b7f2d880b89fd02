"""Choices of the inventory that other apps name too (the people layer of portal keeps a
person's default stack): a leaf that imports only Django, as ``leasing.choices`` is."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class StackFamily(models.TextChoices):
    """The vendor software stack a card's programs are built for: code for one does not run
    on another without porting (operators, precision, versions), so a request may name one."""

    CUDA = "cuda", "CUDA"
    CANN = "cann", "CANN"
    NEUWARE = "neuware", "Neuware"
    DTK = "dtk", "DTK (ROCm/HIP)"
    ROCM = "rocm", "ROCm"
    XPU = "xpu", "XPU (Kunlunxin)"
    MUSA = "musa", "MUSA"
    MACA = "maca", "MACA"
    COREX = "corex", "CoreX (Iluvatar)"
    OTHER = "other", _("Other")
