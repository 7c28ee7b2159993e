"""The OOD scorers, under the name the docs used before the layout (issue 25): the home is
:mod:`monitor.core.ood`; ``from monitor.ood import make_scorer`` keeps working."""

from monitor.core.ood import *  # noqa: F403
from monitor.core.ood import __all__ as __all__
