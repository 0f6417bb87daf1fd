"""The step price: what one engine step of a batch costs, in seconds.

    form.py           the CostModel contract and the defaults forms share
    roofline.py       a dense model on TP: bytes over bandwidth, FLOPs over peak
    deployment.py     the roofline of MoE, MLA, windowed models and PP/EP layouts
    operator_shapes.py, deployment_shapes.py   what one GPU moves and computes per layer
    gpu_form.py       the GPU form on those shapes (dense); gpu_deployment.py its other terms
    dispatch.py       the one place that picks dense or deployment forms
    fitted.py, cpu_form.py, cpu_form_params.py   the CPU backend's two calibrated forms
    linear.py         an intercept and a coefficient per feature
    at_speed.py       a form at a run's measured speed, plus the loop time between steps
    loop_time.py      the serving loop's time between steps
    profile.py, gpu_profile.py, shipped.py, profiles/   saved and shipped profiles
    knobs.py          the constants a price rests on, for sensitivity
Model shapes, the hardware catalogue and layouts live beside it in core/model/."""
