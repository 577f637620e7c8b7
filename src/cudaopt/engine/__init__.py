"""The run engine: every attempt of a run evaluated (cached when seen before), recorded, scored and
summarised. Strategies, the replay of the finalists and the guard measure through it."""
