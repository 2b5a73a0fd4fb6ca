"""Property-based fuzzing of every input format (hypothesis). The bounded profile runs in the
suite; `make fuzz` sets ASRDECODE_FUZZ_EXAMPLES for the long one."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "asrdecode",
    max_examples=int(os.environ.get("ASRDECODE_FUZZ_EXAMPLES", "150")),
    deadline=None,
    derandomize=os.environ.get("ASRDECODE_FUZZ_EXAMPLES") is None,  # CI: the same cases every run
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)
settings.load_profile("asrdecode")
