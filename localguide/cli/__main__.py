"""``python -m localguide.cli``."""

from . import main

main()
