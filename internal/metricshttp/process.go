package metricshttp

// processHelp is the HELP text of the go_* and process_* families
// metrics.WriteProcessMetrics writes on Linux, by the name it writes them
// under (the texts follow its documentation). A family missing here keeps
// an empty HELP line, which promtool reports: the /metrics test of every
// daemon finds it after an upgrade of the library.
var processHelp = Help{
	"go_cgo_calls_count":                  "Calls from Go to C made by the process.",
	"go_cpu_count":                        "Logical CPUs usable by the process (runtime.NumCPU).",
	"go_gc_cpu_seconds_total":             "CPU time spent in the garbage collector, in seconds.",
	"go_gc_duration_seconds":              "Pause durations of the garbage collector's stop-the-world phases, in seconds.",
	"go_gc_forced_count":                  "Garbage collections forced by the application (runtime.GC).",
	"go_gc_mark_assist_cpu_seconds_total": "CPU time goroutines spent assisting the garbage collector's marking, in seconds.",
	"go_gc_pauses_seconds":                "Distribution of the garbage collector's stop-the-world pause durations, in seconds.",
	"go_gomaxprocs":                       "The Go scheduler's GOMAXPROCS: threads that may run Go code at once.",
	"go_goroutines":                       "Goroutines that currently exist.",
	"go_info":                             "The Go version the binary was built with (in the version label); always 1.",
	"go_info_ext":                         "The Go compiler, architecture, operating system and GOROOT of the binary (in labels); always 1.",
	"go_memlimit_bytes":                   "The Go runtime's soft memory limit (GOMEMLIMIT), in bytes.",
	"go_memstats_alloc_bytes":             "Bytes of heap objects allocated and not yet freed.",
	"go_memstats_alloc_bytes_total":       "Bytes allocated for heap objects since the process started.",
	"go_memstats_buck_hash_sys_bytes":     "Bytes of memory in profiling bucket hash tables.",
	"go_memstats_frees_total":             "Heap objects freed since the process started.",
	"go_memstats_gc_cpu_fraction":         "Fraction of the process's available CPU time used by the garbage collector since the process started.",
	"go_memstats_gc_sys_bytes":            "Bytes of memory in garbage collection metadata.",
	"go_memstats_heap_alloc_bytes":        "Bytes of heap objects allocated and not yet freed (as go_memstats_alloc_bytes).",
	"go_memstats_heap_idle_bytes":         "Bytes of idle heap spans, ready for new allocations or to be returned to the operating system.",
	"go_memstats_heap_inuse_bytes":        "Bytes of heap spans in use.",
	"go_memstats_heap_objects":            "Heap objects allocated and not yet freed.",
	"go_memstats_heap_released_bytes":     "Bytes of heap memory returned to the operating system.",
	"go_memstats_heap_sys_bytes":          "Bytes of heap memory obtained from the operating system.",
	"go_memstats_last_gc_time_seconds":    "When the last garbage collection finished, in seconds since the Unix epoch.",
	"go_memstats_lookups_total":           "Pointer lookups performed by the runtime since the process started.",
	"go_memstats_mallocs_total":           "Heap objects allocated since the process started.",
	"go_memstats_mcache_inuse_bytes":      "Bytes of allocated mcache structures.",
	"go_memstats_mcache_sys_bytes":        "Bytes of memory obtained from the operating system for mcache structures.",
	"go_memstats_mspan_inuse_bytes":       "Bytes of allocated mspan structures.",
	"go_memstats_mspan_sys_bytes":         "Bytes of memory obtained from the operating system for mspan structures.",
	"go_memstats_next_gc_bytes":           "Heap size at which the next garbage collection starts, in bytes.",
	"go_memstats_other_sys_bytes":         "Bytes of memory in miscellaneous off-heap runtime allocations.",
	"go_memstats_stack_inuse_bytes":       "Bytes of memory in goroutine stacks.",
	"go_memstats_stack_sys_bytes":         "Bytes of memory obtained from the operating system for goroutine stacks.",
	"go_memstats_sys_bytes":               "Bytes of memory obtained from the operating system by the Go runtime.",
	"go_mutex_wait_seconds_total":         "Time goroutines spent blocked on a sync.Mutex or sync.RWMutex, in seconds.",
	"go_scavenge_cpu_seconds_total":       "CPU time spent returning memory to the operating system, in seconds.",
	"go_sched_latencies_seconds":          "Distribution of the time goroutines spent ready to run before running, in seconds.",
	"go_threads":                          "Operating system threads created by the Go runtime.",

	"process_cgroup_cpu_throttled_seconds_total":    "Time the processes of the process's cgroup were throttled by its CPU limit since the process started, in seconds.",
	"process_cpu_seconds_system_total":              "CPU time the process spent in the kernel, in seconds.",
	"process_cpu_seconds_total":                     "CPU time the process spent, user and kernel, in seconds.",
	"process_cpu_seconds_user_total":                "CPU time the process spent in user space, in seconds.",
	"process_io_read_bytes_total":                   "Bytes the process read with read-like system calls (from disk, cache, sockets or pipes).",
	"process_io_read_syscalls_total":                "Read-like system calls the process made.",
	"process_io_storage_read_bytes_total":           "Bytes the process caused to be read from storage.",
	"process_io_storage_written_bytes_total":        "Bytes the process caused to be written to storage.",
	"process_io_write_syscalls_total":               "Write-like system calls the process made.",
	"process_io_written_bytes_total":                "Bytes the process wrote with write-like system calls (to disk, cache, sockets or pipes).",
	"process_major_pagefaults_total":                "Page faults of the process that needed disk I/O.",
	"process_minor_pagefaults_total":                "Page faults of the process resolved without disk I/O.",
	"process_num_threads":                           "Operating system threads of the process.",
	"process_pressure_cpu_stalled_seconds_total":    "Time all processes of the process's cgroup (v2) were stalled waiting for CPU since the process started, in seconds.",
	"process_pressure_cpu_waiting_seconds_total":    "Time some processes of the process's cgroup (v2) waited for CPU since the process started, in seconds.",
	"process_pressure_io_stalled_seconds_total":     "Time all processes of the process's cgroup (v2) were stalled waiting for I/O since the process started, in seconds.",
	"process_pressure_io_waiting_seconds_total":     "Time some processes of the process's cgroup (v2) waited for I/O since the process started, in seconds.",
	"process_pressure_memory_stalled_seconds_total": "Time all processes of the process's cgroup (v2) were stalled waiting for memory since the process started, in seconds.",
	"process_pressure_memory_waiting_seconds_total": "Time some processes of the process's cgroup (v2) waited for memory since the process started, in seconds.",
	"process_resident_memory_anon_bytes":            "Resident memory of the process allocated by it (anonymous), in bytes.",
	"process_resident_memory_bytes":                 "Resident memory of the process (RSS), in bytes.",
	"process_resident_memory_file_bytes":            "Resident memory of the process mapping files, in bytes.",
	"process_resident_memory_peak_bytes":            "Peak resident memory of the process, in bytes.",
	"process_resident_memory_shared_bytes":          "Resident memory of the process shared with other processes, in bytes.",
	"process_start_time_seconds":                    "When the process started, in seconds since the Unix epoch.",
	"process_virtual_memory_bytes":                  "Virtual memory of the process, in bytes.",
	"process_virtual_memory_peak_bytes":             "Peak virtual memory of the process, in bytes.",
}

// processFixes are the process families metrics.WriteProcessMetrics names
// or types against Prometheus's conventions, as /metrics serves them
// instead (docs/operations.md, "Metrics", lists these renames):
//
//   - a counter ends in _total, and only a counter, histogram or summary
//     ends in _count: go_cgo_calls_count and go_gc_forced_count are
//     counters, go_cpu_count a gauge;
//   - the process_io_* series count since the process started but are
//     written as gauges.
var processFixes = map[string]fix{
	"go_cgo_calls_count": {name: "go_cgo_calls_total"},
	"go_gc_forced_count": {name: "go_gc_forced_total"},
	"go_cpu_count":       {name: "go_cpus"},

	"process_io_read_bytes_total":            {counter: true},
	"process_io_read_syscalls_total":         {counter: true},
	"process_io_storage_read_bytes_total":    {counter: true},
	"process_io_storage_written_bytes_total": {counter: true},
	"process_io_write_syscalls_total":        {counter: true},
	"process_io_written_bytes_total":         {counter: true},
}
