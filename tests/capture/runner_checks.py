"""Helpers shared by the runner tests of both generations."""


def eager_then_runner(runner, batch):
    """(eager logits, runner logits, eager caches, runner caches) from the same cache state."""
    model = runner.model
    start = [c.clone() for c in model.kv_caches()]
    ref = model(batch.input_ids, batch.positions, batch.slots)
    ref_caches = [c.clone() for c in model.kv_caches()]
    for cache, saved in zip(model.kv_caches(), start):
        cache.copy_(saved)
    out = runner.execute_batch(batch).clone()
    return ref, out, ref_caches, [c.clone() for c in model.kv_caches()]
