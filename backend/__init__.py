"""The torch world: a Llama-family model runner with a paged KV cache, driven by
core's schedulers on the wall clock."""
