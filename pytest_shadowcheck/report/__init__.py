"""Reports made from verdicts, with no pytest: the certification report
(:mod:`.certification`), a workload's timeline page (:mod:`.timeline`), the matrix of
several certifications (:mod:`.matrix`) and the behaviour table of the README
(:mod:`.catalogue`)."""
