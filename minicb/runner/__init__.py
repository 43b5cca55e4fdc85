"""Running a batch: a step's decision as flat tensors (batch, batch_builder), run by the model (model_runner)
or priced by a step-cost model (simulator)."""
