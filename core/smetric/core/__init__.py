"""SMetric core: request/endpoint views, SLOs, cost model and the policy-name catalogue.

Everything here is pure (no I/O) and shared by the simulator, the emulator and the picker.
"""
