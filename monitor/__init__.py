"""Online ML monitoring with anytime-valid sequential tests.

Weighted conformal test martingales (WATCH) with CUSUM / Shiryaev–Roberts / Ville alarms, OOD
scorers with FDR-controlled decision rules, and a diagnosis of every alarm. See README.md.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
