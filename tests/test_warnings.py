"""The suite hides only named third-party warnings: the project's own warnings surface."""
import warnings


def test_the_projects_own_warnings_are_not_filtered():
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn("a deprecation in Batchscope", DeprecationWarning, stacklevel=1)
        warnings.warn("a mistake Batchscope warns about", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["a deprecation in Batchscope",
                                                "a mistake Batchscope warns about"]
