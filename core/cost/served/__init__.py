"""A served engine's step, priced on top of an operator-fitted GPU profile: what the
engine does that operators timed one at a time do not show (CUDA graphs, its own
all-reduce, fused elementwise kernels, its attention kernel, its own time a step).

    engine.py   the engine's facts, from its source (version named)
    terms.py    ServedTerms: the constants fitted on served benchmarks, and how they
                change a GPU profile's constants
    model.py    ServedGpuCost: a step priced as the engine runs it (graph, piecewise, eager;
                compiled: the default price)
    allreduce.py EngineAllReduce: the engine's all-reduce by message size
    formats.py  the weight formats a model's GEMMs run in (bf16, fp8 per-tensor and
                blockwise, mxfp4 MoE) and each format's rate term, with its prior
    host.py     the host time a step, and async scheduling's share of it hidden
    profile.py  ServedProfile: fitted terms with their held-out error; the shipped one
                (core/cost/profiles/served/vllm.json) is the default price's
"""
