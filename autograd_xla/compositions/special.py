"""scipy.special functions written as compositions of others: multigammaln, a sum of
gammaln terms whose count is its static argument d (scipy's own code makes an array of
`a` with np.asarray, to check its values, which traced values cannot do). Registered once
scipy.special is imported (registry.when_imported).
"""
import operator

import numpy as np

from ..registry import LazyModule, traces, when_imported

sc = LazyModule("scipy.special")


def _multigammaln(a, d):
    """log of the multivariate gamma function, as scipy sums it: a constant plus
    gammaln(a - j/2) for j < d. scipy's check a > (d - 1)/2 needs data and is skipped."""
    d = operator.index(d)  # a traced d needs its value: the argument it came from becomes static
    total = sc.gammaln(a)
    for j in range(2, d + 1):
        total = total + sc.gammaln(a - (j - 1.0) / 2)
    return (d * (d - 1) * 0.25) * np.log(np.pi) + total


@when_imported("scipy.special")
def _register(special):
    traces(special.multigammaln)(_multigammaln)
