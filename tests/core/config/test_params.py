"""Parameter checks (config/params.py): ``finite=True`` refuses infinities, naming the parameter and its range."""

import math

import pytest

from dataflex_callbacks.config.params import check_number
from dataflex_callbacks.errors import ParamError


@pytest.mark.parametrize("value", [math.inf, -math.inf, float("1e400")])
def test_a_finite_parameter_refuses_infinity_naming_its_range(value):
    with pytest.raises(ParamError, match=r"'weight' must be a finite number >= 0\.0; got -?inf") as error:
        check_number("weight", value, low=0.0, finite=True)
    assert error.value.param == "weight"


def test_infinity_passes_where_it_is_a_bound_and_nan_never_does():
    assert check_number("high", math.inf) == math.inf  # threshold_band's open upper end
    assert check_number("weight", 2, low=0.0, finite=True) == 2.0
    with pytest.raises(ParamError, match="must be a number"):
        check_number("high", math.nan)
