"""One package per op: ``softmax`` (softmax, log_softmax), ``linear`` (fused_linear_relu),
``attention``. Each holds its public functions (``api``), a pure default selection
(``select``) and one class per kernel variant, which owns its kernel spec, eligibility,
grid, arguments and scratch (see ``cufuse._core.plans``)."""
