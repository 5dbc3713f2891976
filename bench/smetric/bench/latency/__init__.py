"""The picker's data path measured (docs/picker.md): each module is a command,
``python -m smetric.bench.latency.<module> --help``.

:mod:`.picker` (decision latency, added latency through Envoy, sustained rate), :mod:`.side_by_side`
(Envoy + picker against ``vllm-router`` on the same backends), :mod:`.gateway_filters` (A/B of the
gateway's Lua filters), :mod:`.restart` (a single picker's restart window); :mod:`.harness` is what
they share.
"""
