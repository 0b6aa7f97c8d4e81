"""A HiGHS model that prints nothing on stdout.

highspy 1.16 prints its banner ("Running HiGHS …") on stdout when a model is created, before
``output_flag`` can be set; the model is therefore created with stdout pointed at stderr.
"""

from __future__ import annotations

import highspy

from apportion.stdio import stdout_to_stderr


def quiet_highs() -> highspy.Highs:
    """A new HiGHS model with its log off; any banner goes to stderr, never to stdout."""
    with stdout_to_stderr():
        highs = highspy.Highs()
    highs.setOptionValue("output_flag", False)
    return highs
