"""The suite's warning rules (setup.cfg): a deprecation attributed to one of our modules fails the test that meets
it, so a call of ours that a library deprecates is fixed rather than printed (transformers 5.24's past_key_values
notice was 147 of the suite's warnings); one attributed to a library is only reported."""

import warnings

import pytest


@pytest.mark.parametrize("category", [DeprecationWarning, FutureWarning])
@pytest.mark.parametrize("module", ["recipe.generator", "sweeps", "components.losses", "fitting.fit", "reports.pdf"])
def test_a_deprecation_raised_in_our_modules_is_an_error(category, module):
    with pytest.raises(category):
        warnings.warn_explicit("an API this project calls is deprecated", category, f"{module}.py", 1, module=module)


def test_one_raised_in_a_library_is_reported_not_raised():
    with pytest.warns(DeprecationWarning):
        warnings.warn_explicit("deprecated", DeprecationWarning, "transformers/x.py", 1, module="transformers.x")
