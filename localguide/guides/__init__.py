"""Engine-neutral guide layers: combinators of the guide protocol and the logits seam."""

from .logits import allowed_row, mask_logits

__all__ = ["allowed_row", "mask_logits"]
