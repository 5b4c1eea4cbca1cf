"""Engine-neutral guide layers: combinators of the guide protocol (a trigger, tool calls, token
healing, stop strings that keep the guarantee) and the logits seam any engine masks through."""

from .logits import allowed_row, mask_logits

__all__ = ["allowed_row", "mask_logits"]
