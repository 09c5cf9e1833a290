"""AR(2) transfer-function (ARX) model: the mean follows an AR(2) recursion driven by an observed input, built with `pytensor.scan` (mit-sot, taps [-2, -1]).

m_t = rho_1 * m_{t-1} + rho_2 * m_{t-2} + beta * u_t (e.g. sales responding to advertising spend u with
damped second-order carry-over); y_t ~ Normal(mu + m_t, sigma). Stationarity is enforced by parameterizing
(rho_1, rho_2) through partial autocorrelations in (-1, 1).
Size: 500 obs (time steps); 7 parameters (2 partial autocorrelations, beta, mu, sigma, 2 initial states).
"""

import numpy as np
import pymc as pm
import pytensor


def build_model(n_steps=500, seed=0):
    rng = np.random.default_rng(seed)
    u = rng.gamma(0.5, 2.0, n_steps)
    rho1, rho2, beta = 1.2, -0.5, 0.5
    m = np.zeros(n_steps + 2)
    for t in range(n_steps):
        m[t + 2] = rho1 * m[t + 1] + rho2 * m[t] + beta * u[t]
    y = 2.0 + m[2:] + 0.3 * rng.normal(size=n_steps)
    with pm.Model(coords={"time": np.arange(n_steps), "lag": [-2, -1]}) as model:
        u_data = pm.Data("u", u, dims="time")
        y_data = pm.Data("y", y, dims="time")
        pacf_1 = pm.Uniform("pacf_1", -1.0, 1.0)
        pacf_2 = pm.Uniform("pacf_2", -1.0, 1.0)
        rho_1 = pm.Deterministic("rho_1", pacf_1 * (1.0 - pacf_2))
        rho_2 = pm.Deterministic("rho_2", pacf_2)
        beta = pm.Normal("beta", 0.0, 1.0)
        mu = pm.Normal("mu", 0.0, 5.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        m_init = pm.Normal("m_init", 0.0, 1.0, dims="lag")

        def step(u_t, m_tm2, m_tm1, r1, r2, b):
            return r1 * m_tm1 + r2 * m_tm2 + b * u_t

        mean = pytensor.scan(
            step,
            sequences=[u_data],
            outputs_info=[{"initial": m_init, "taps": [-2, -1]}],
            non_sequences=[rho_1, rho_2, beta],
            n_steps=n_steps,
            strict=True,
            return_updates=False,
        )
        pm.Normal("y_obs", mu + mean, sigma, observed=y_data, dims="time")
    return model
