"""The worker: one loop (`runner`) that works a job's leased work from its sources, rollouts
(`rollouts`) and judgements (`judging`), with its HTTP clients (`clients`) and group commits
(`batching`). It sits on top: it may use everything in jobs and traces."""
