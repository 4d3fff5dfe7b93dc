"""The stand-in chart tree the tests run the program on: ops/stand_in_charts.py (make graph uses it too)."""

from ops.stand_in_charts import (  # noqa: F401 -- re-exported for the tests
    CRD_KINDS,
    UNNAMED_VERSIONS,
    chart_version,
    fake_crd,
    stand_in_charts,
    write_fake_charts,
)
