"""The docker target: an MTA image as one container per node, described in YAML.

The target (:mod:`.target`), its description (:mod:`.description`), the admin adapters
run inside the containers (:mod:`.admin`), helpers (:mod:`.support`) and the local
image recipes (:mod:`.images`)."""
