"""The reference MTA: a real multi-node SMTP transport with shadow redundancy and Safety Net."""
