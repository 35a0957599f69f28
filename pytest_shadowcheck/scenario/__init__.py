"""Scenarios: the YAML a user writes, loaded into the plain data the engine runs.

The loader (:mod:`.loader`) reads a file with line marks (:mod:`.marked_yaml`), checks its
shape against the JSON Schema (:mod:`.schema`) and its meaning against the topology
(:mod:`.validation`), and builds the model (:mod:`.model`), with durations parsed
(:mod:`.durations`), each action step's arguments as a typed spec (:mod:`.steps`; a
workload's in :mod:`.workload_spec`), and the capabilities each step needs
(:mod:`.capabilities`). Nothing here touches the network."""
