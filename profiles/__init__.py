"""profiles: what serving costs on a device, as the policy and the simulator price it.

The bottom layer (pure, standard library and numpy): :mod:`profiles.schema` (the
profile document; :mod:`profiles.profile_read` reads and checks one),
:mod:`profiles.cost` (the cost model the simulator steps with), :mod:`profiles.fitmath`
(the fits and the default context grid), :mod:`profiles.models` (KV bytes per token
from a model config), :mod:`profiles.roofline` and :mod:`profiles.shipped` (the profiles
shipped in ``profiles/data``). The profilers sit a layer higher: :mod:`profiles.measure_torch`
(a model built with torch on this machine) and :mod:`profiles.measure_server` (a
running vLLM server). See docs/architecture.md.
"""
