"""The fault harness: workloads, clusters of brokers and soaks run under injected faults
(the kit they use, fault schedules, the faulty store and proxy, the history checker, is
``s3q.faults``)."""
