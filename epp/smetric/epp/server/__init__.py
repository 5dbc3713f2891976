"""The picker's request path: ext_proc servicer, decision assembly, dispatch ledger, prefill rate."""
