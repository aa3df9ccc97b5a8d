# SPDX-License-Identifier: BSD-3-Clause
# Step-level recovery (issue #4): the coordinator (libresihp/control), the
# in-rank job API (libresihp/recovery), the resihp-run launcher, the example
# trainer, tests, demo and man page.
libresihp_libresihp_internal_la_SOURCES += \
	libresihp/control/wire.h \
	libresihp/control/wire.c \
	libresihp/control/handshake.c \
	libresihp/control/lobby.c libresihp/control/lobby.h \
	libresihp/control/coordinator.h \
	libresihp/control/coord_internal.h \
	libresihp/control/coord_members.c \
	libresihp/control/coord_layers.c \
	libresihp/control/coord_pace.c \
	libresihp/control/coord_schedule.c \
	libresihp/control/coord_rounds.c \
	libresihp/control/coord_spares.c \
	libresihp/control/coord_protocol.c \
	libresihp/control/coord_summary.c \
	libresihp/control/coord_perf.c \
	libresihp/control/coord_repart.c \
	libresihp/control/coord_decide.c \
	libresihp/control/coord_shrink.c \
	libresihp/control/costplan.h \
	libresihp/control/costplan.c \
	libresihp/control/coord_loop.c \
	libresihp/control/spare_agent.h \
	libresihp/control/spare_agent.c \
	libresihp/control/record.h \
	libresihp/control/record.c \
	libresihp/recovery/inject.h \
	libresihp/recovery/inject.c \
	libresihp/recovery/job_internal.h \
	libresihp/recovery/job.c \
	libresihp/recovery/job_link.c \
	libresihp/recovery/job_replica.c \
	libresihp/recovery/job_step.c \
	libresihp/recovery/job_members.h \
	libresihp/recovery/job_members.c \
	libresihp/recovery/layer_groups.h \
	libresihp/recovery/layer_groups.c \
	libresihp/recovery/job_layers.c \
	libresihp/recovery/job_layer_state.c \
	libresihp/recovery/job_groups.c \
	libresihp/recovery/job_exchange.c \
	libresihp/recovery/job_catchup.c \
	libresihp/recovery/job_coords.c \
	libresihp/recovery/job_faults.c \
	libresihp/recovery/job_perf.c \
	libresihp/recovery/pmix_wireup.h
# The PMIx wire-up inside a replica's step, on its own so that only it sees
# PMIx's headers.
noinst_LTLIBRARIES += libresihp/libresihp-pmixwire.la
libresihp_libresihp_pmixwire_la_SOURCES = libresihp/recovery/pmix_wireup.c
libresihp_libresihp_pmixwire_la_CPPFLAGS = $(AM_CPPFLAGS) $(PMIX_CFLAGS)
libresihp_libresihp_pmixwire_la_LIBADD = $(PMIX_LIBS)
libresihp_libresihp_internal_la_LIBADD += libresihp/libresihp-pmixwire.la
# The job's metrics (control/record.c) use the Prometheus textfile writer.
libresihp_libresihp_internal_la_LIBADD += libresihp/libresihp-metrics.la
resihpinclude_HEADERS += libresihp/include/resihp/job.h

bin_PROGRAMS += tools/resihp-run
tools_resihp_run_SOURCES = tools/run/run.h tools/run/main.c \
	tools/run/launch.c tools/run/spares.c tools/run/events.c \
	tools/run/save.c tools/run/record.c tools/run/standby.c \
	tools/run/vouching.c tools/run/lease.c \
	tools/run/primary.c tools/run/cmd.c tools/run/cmd.h tools/run/slurm.c \
	tools/run/slurm.h tools/run/secret.c tools/run/secret.h \
	tools/run/report.c tools/run/jobnote.c tools/run/jobnote.h \
	tools/run/comment.c tools/run/shrink_pick.c tools/run/shrink_pick.h \
	tools/run/shrink_rec.c tools/run/shrink_rec.h \
	tools/run/verdict.c tools/run/verdict.h
tools_resihp_run_LDADD = libresihp/libresihp-internal.la
# What it reads from scontrol (a standby's takeover rests on it).
if HAVE_CHECK
check_PROGRAMS += tests/unit/test_run_slurm
tests_unit_test_run_slurm_SOURCES = tests/unit/test_run_slurm.c \
	tools/run/slurm.c tools/run/slurm.h tools/run/jobnote.c tools/run/jobnote.h \
	tools/run/shrink_pick.c tools/run/shrink_pick.h \
	tools/run/shrink_rec.c tools/run/shrink_rec.h \
	tools/run/verdict.c tools/run/verdict.h
tests_unit_test_run_slurm_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_run_slurm_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_run_slurm
# What a launcher that takes over reads of its predecessor's own state.
check_PROGRAMS += tests/unit/test_run_record
tests_unit_test_run_record_SOURCES = tests/unit/test_run_record.c \
	tools/run/record.c tools/run/run.h tools/run/shrink_rec.c tools/run/shrink_rec.h
tests_unit_test_run_record_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_run_record_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_run_record
# The job secret's file and its clean-up after a killed keeper.
check_PROGRAMS += tests/unit/test_run_secret
tests_unit_test_run_secret_SOURCES = tests/unit/test_run_secret.c \
	tools/run/secret.c tools/run/secret.h
tests_unit_test_run_secret_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_run_secret_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_run_secret
endif
# and of the names that clean-up reads from the shared secret directory.
check_PROGRAMS += tests/fuzz/fuzz_secret_name
tests_fuzz_fuzz_secret_name_SOURCES = tests/fuzz/fuzz_secret_name.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h \
	tools/run/secret.c tools/run/secret.h
tests_fuzz_fuzz_secret_name_LDADD = libresihp/libresihp-core.la
TESTS += tests/fuzz/fuzz_secret_name
EXTRA_DIST += tests/fuzz/corpus-secret/valid tests/fuzz/corpus-secret/array \
	tests/fuzz/corpus-secret/long-job tests/fuzz/corpus-secret/suffix \
	tests/fuzz/corpus-secret/empty-job
# The fuzz target of its command templates (tests/fuzz/README), run by
# `make check` over its corpus and generated inputs.
check_PROGRAMS += tests/fuzz/fuzz_cmd
tests_fuzz_fuzz_cmd_SOURCES = tests/fuzz/fuzz_cmd.c tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h \
	tools/run/cmd.c tools/run/cmd.h
tests_fuzz_fuzz_cmd_LDADD = libresihp/libresihp-core.la
# and of the fault injection plans (--inject, RESIHP_INJECT).
check_PROGRAMS += tests/fuzz/fuzz_inject
tests_fuzz_fuzz_inject_SOURCES = tests/fuzz/fuzz_inject.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_inject_LDADD = libresihp/libresihp-internal.la
TESTS += tests/fuzz/fuzz_cmd tests/fuzz/fuzz_inject
# and of the job's Comment read back from squeue (jobnote.h).
check_PROGRAMS += tests/fuzz/fuzz_jobnote
tests_fuzz_fuzz_jobnote_SOURCES = tests/fuzz/fuzz_jobnote.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h \
	tools/run/jobnote.c tools/run/jobnote.h
tests_fuzz_fuzz_jobnote_LDADD = libresihp/libresihp-core.la
TESTS += tests/fuzz/fuzz_jobnote
EXTRA_DIST += tests/fuzz/corpus-jobnote/ours tests/fuzz/corpus-jobnote/null \
	tests/fuzz/corpus-jobnote/huge
# and of a GO's member list, whole or as a change (job_members.c).
check_PROGRAMS += tests/fuzz/fuzz_members
tests_fuzz_fuzz_members_SOURCES = tests/fuzz/fuzz_members.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_members_LDADD = libresihp/libresihp-internal.la
TESTS += tests/fuzz/fuzz_members
# and of a partition's cut points (layer_groups.c: the layer-keyed groups).
check_PROGRAMS += tests/fuzz/fuzz_layer_groups
tests_fuzz_fuzz_layer_groups_SOURCES = tests/fuzz/fuzz_layer_groups.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_layer_groups_LDADD = libresihp/libresihp-internal.la
TESTS += tests/fuzz/fuzz_layer_groups
EXTRA_DIST += tests/fuzz/corpus-layer-groups/cuts \
	tests/fuzz/corpus-layer-groups/empty tests/fuzz/corpus-layer-groups/repeat \
	tests/fuzz/corpus-layer-groups/many
# and of a GO's partitions of the layers (lparts=, layer_groups.c).
check_PROGRAMS += tests/fuzz/fuzz_lparts
tests_fuzz_fuzz_lparts_SOURCES = tests/fuzz/fuzz_lparts.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_lparts_LDADD = libresihp/libresihp-internal.la
TESTS += tests/fuzz/fuzz_lparts
EXTRA_DIST += tests/fuzz/corpus-lparts/one tests/fuzz/corpus-lparts/three \
	tests/fuzz/corpus-lparts/twice tests/fuzz/corpus-lparts/stranger \
	tests/fuzz/corpus-lparts/shrunk
# and of a catch-up's pieces (serve= entries, offers: job_layer_state.c).
check_PROGRAMS += tests/fuzz/fuzz_serve_entry
tests_fuzz_fuzz_serve_entry_SOURCES = tests/fuzz/fuzz_serve_entry.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_serve_entry_LDADD = libresihp/libresihp-internal.la
TESTS += tests/fuzz/fuzz_serve_entry
EXTRA_DIST += tests/fuzz/corpus-serve-entry/layers \
	tests/fuzz/corpus-serve-entry/rank tests/fuzz/corpus-serve-entry/whole \
	tests/fuzz/corpus-serve-entry/offer
# and of a GO's moved= list (repartition, job_layers.c).
check_PROGRAMS += tests/fuzz/fuzz_moved
tests_fuzz_fuzz_moved_SOURCES = tests/fuzz/fuzz_moved.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_moved_LDADD = libresihp/libresihp-internal.la
TESTS += tests/fuzz/fuzz_moved
EXTRA_DIST += tests/fuzz/corpus-moved/one tests/fuzz/corpus-moved/three \
	tests/fuzz/corpus-moved/empty-item tests/fuzz/corpus-moved/huge
# and of a GO's shrunk= list (a replica that lost ranks, coord_shrink.c).
check_PROGRAMS += tests/fuzz/fuzz_shrunk
tests_fuzz_fuzz_shrunk_SOURCES = tests/fuzz/fuzz_shrunk.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_shrunk_LDADD = libresihp/libresihp-internal.la
TESTS += tests/fuzz/fuzz_shrunk
EXTRA_DIST += tests/fuzz/corpus-shrunk/one tests/fuzz/corpus-shrunk/several \
	tests/fuzz/corpus-shrunk/twice tests/fuzz/corpus-shrunk/rank-past \
	tests/fuzz/corpus-shrunk/empty-item
# and of resihp-run's record of a replica that may shrink in place
# (tools/run/shrink_rec.c: what a launcher taking over goes on with).
check_PROGRAMS += tests/fuzz/fuzz_shrink_rec
tests_fuzz_fuzz_shrink_rec_SOURCES = tests/fuzz/fuzz_shrink_rec.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h \
	tools/run/shrink_rec.c tools/run/shrink_rec.h
tests_fuzz_fuzz_shrink_rec_LDADD = libresihp/libresihp-internal.la
TESTS += tests/fuzz/fuzz_shrink_rec
EXTRA_DIST += tests/fuzz/corpus-shrink-rec/waiting tests/fuzz/corpus-shrink-rec/lost \
	tests/fuzz/corpus-shrink-rec/node-past tests/fuzz/corpus-shrink-rec/trailing
# and of RESIHP_FAILOVER_MS (job_link.c).
check_PROGRAMS += tests/fuzz/fuzz_failover_ms
tests_fuzz_fuzz_failover_ms_SOURCES = tests/fuzz/fuzz_failover_ms.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_failover_ms_LDADD = libresihp/libresihp-internal.la
TESTS += tests/fuzz/fuzz_failover_ms
EXTRA_DIST += tests/fuzz/corpus-failover-ms/plain \
	tests/fuzz/corpus-failover-ms/zero tests/fuzz/corpus-failover-ms/too-big \
	tests/fuzz/corpus-failover-ms/overflow tests/fuzz/corpus-failover-ms/unit
EXTRA_DIST += tests/fuzz/corpus-members/delta tests/fuzz/corpus-members/readded \
	tests/fuzz/corpus-members/whole tests/fuzz/corpus-members/dup
EXTRA_DIST += tests/fuzz/corpus-cmd/plain tests/fuzz/corpus-cmd/evil-node \
	tests/fuzz/corpus-cmd/bad-escape tests/fuzz/corpus-cmd/empty \
	tests/fuzz/corpus-cmd/escapes tests/fuzz/corpus-inject/plain \
	tests/fuzz/corpus-inject/bad-step tests/fuzz/corpus-inject/trailing \
	tests/fuzz/corpus-inject/too-many tests/fuzz/corpus-inject/ranks \
	tests/fuzz/corpus-inject/slow tests/fuzz/corpus-inject/slow-bad

# The example trainer: the tests' and the demo's, and resihp-run(1)'s
# example (installed with it).
bin_PROGRAMS += contrib/trainer/resihp-trainer
contrib_trainer_resihp_trainer_SOURCES = contrib/trainer/trainer.c \
	contrib/common/trainer-common.c contrib/common/trainer-layers.c \
	contrib/common/trainer-rendezvous.c \
	contrib/common/trainer-common.h contrib/common/trainer-data.c \
	contrib/common/trainer-data.h
contrib_trainer_resihp_trainer_LDADD = libresihp/libresihp.la -lm
# resihp-run(1)'s example runs the installed trainer (distcheck checks it).
installcheck-local: installcheck-trainer
installcheck-trainer:
	$(DESTDIR)$(bindir)/resihp-trainer --help | grep -q -- --mb-work
	$(DESTDIR)$(bindir)/resihp-trainer --reference --steps 2 --microbatches 2 \
	  --mb-work 10 --print-every 0 | grep -q 'final checksum'
.PHONY: installcheck-trainer
# and the pipeline-parallel one (sharded replicas: --ranks-per-replica).
include contrib/pipeline-trainer/local.mk

if HAVE_CHECK
check_PROGRAMS += tests/unit/test_recovery
tests_unit_test_recovery_SOURCES = tests/unit/test_recovery.c
tests_unit_test_recovery_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_recovery_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_recovery
check_PROGRAMS += tests/unit/test_record
tests_unit_test_record_SOURCES = tests/unit/test_record.c
tests_unit_test_record_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_record_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_record
check_PROGRAMS += tests/unit/test_failslow
tests_unit_test_failslow_SOURCES = tests/unit/test_failslow.c
tests_unit_test_failslow_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_failslow_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_failslow
check_PROGRAMS += tests/unit/test_freerun
tests_unit_test_freerun_SOURCES = tests/unit/test_freerun.c \
	tests/unit/rank_group.c tests/unit/rank_group.h \
	tests/unit/train_model.c tests/unit/train_model.h
tests_unit_test_freerun_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_freerun_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_freerun
check_PROGRAMS += tests/unit/test_job_failover
tests_unit_test_job_failover_SOURCES = tests/unit/test_job_failover.c \
	tests/unit/rank_group.c tests/unit/rank_group.h \
	tests/unit/train_model.c tests/unit/train_model.h
tests_unit_test_job_failover_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_job_failover_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_job_failover

check_PROGRAMS += tests/unit/test_layer_groups
tests_unit_test_layer_groups_SOURCES = tests/unit/test_layer_groups.c
tests_unit_test_layer_groups_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_layer_groups_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_layer_groups

check_PROGRAMS += tests/unit/test_catchup_serve
tests_unit_test_catchup_serve_SOURCES = tests/unit/test_catchup_serve.c
tests_unit_test_catchup_serve_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_catchup_serve_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_catchup_serve
endif

dist_check_SCRIPTS += tests/integration/recovery.test \
	tests/integration/spares.test tests/integration/launcher.test \
	tests/integration/shards.test tests/integration/failslow.test
TESTS += tests/integration/recovery.test tests/integration/spares.test \
	tests/integration/launcher.test tests/integration/shards.test \
	tests/integration/failslow.test

dist_bin_SCRIPTS = tools/resihp-bench-recovery.sh tools/resihp-bench-failslow.sh
EXTRA_DIST += contrib/demo/run-training-demo.sh
dist_man_MANS += man/resihp-run.1 man/resihp_job.3

# Fuzz targets of the control plane: the coordinator's message handler and
# the wire's framing and parsers, also run as tests over their corpora
# (tests/fuzz/README).
check_PROGRAMS += tests/fuzz/fuzz_coord tests/fuzz/fuzz_coord_wire
tests_fuzz_fuzz_coord_SOURCES = tests/fuzz/fuzz_coord.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_coord_LDADD = libresihp/libresihp-internal.la
tests_fuzz_fuzz_coord_wire_SOURCES = tests/fuzz/fuzz_coord_wire.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_coord_wire_LDADD = libresihp/libresihp-internal.la
TESTS += tests/fuzz/fuzz_coord tests/fuzz/fuzz_coord_wire
EXTRA_DIST += tests/fuzz/corpus-coord/session tests/fuzz/corpus-coord/recover \
	tests/fuzz/corpus-coord/rogue tests/fuzz/corpus-coord/bad-hello \
	tests/fuzz/corpus-coord/sharded tests/fuzz/corpus-coord/layers tests/fuzz/corpus-coord/repart tests/fuzz/corpus-coord/failslow \
	tests/fuzz/corpus-coord/freerun tests/fuzz/corpus-coord/recover-gone \
	tests/fuzz/corpus-coord/burnin tests/fuzz/corpus-coord/burnin-gpu \
	tests/fuzz/corpus-coord/lost \
	tests/fuzz/corpus-coord-wire/plain tests/fuzz/corpus-coord-wire/sealed \
	tests/fuzz/corpus-coord-wire/sealed-intact \
	tests/fuzz/corpus-coord-wire/ints

# Fuzz target of the address lists of sharded replicas (ep=a/b/... in
# HELLO and GO, parsed by the coordinator and by every rank).
check_PROGRAMS += tests/fuzz/fuzz_addr_list
tests_fuzz_fuzz_addr_list_SOURCES = tests/fuzz/fuzz_addr_list.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_addr_list_LDADD = libresihp/libresihp-internal.la -lm
TESTS += tests/fuzz/fuzz_addr_list
# Fuzz target of the figures ranks send the fail-slow detector (PERF, WL).
check_PROGRAMS += tests/fuzz/fuzz_tuples
tests_fuzz_fuzz_tuples_SOURCES = tests/fuzz/fuzz_tuples.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_tuples_LDADD = libresihp/libresihp-internal.la -lm
TESTS += tests/fuzz/fuzz_tuples
EXTRA_DIST += tests/fuzz/corpus-tuples/perf tests/fuzz/corpus-tuples/wl \
	tests/fuzz/corpus-tuples/empty-item
EXTRA_DIST += tests/fuzz/corpus-addr-list/two \
	tests/fuzz/corpus-addr-list/empty-item tests/fuzz/corpus-addr-list/trailing
# The coordinator without fixed limits (tables sized from the job).
if HAVE_CHECK
check_PROGRAMS += tests/unit/test_coord_scale
tests_unit_test_coord_scale_SOURCES = tests/unit/test_coord_scale.c
tests_unit_test_coord_scale_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_coord_scale_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_coord_scale
endif
# Fuzz target of the joiner's side of the handshake (resihp__wire_cli_step).
check_PROGRAMS += tests/fuzz/fuzz_hs_client
tests_fuzz_fuzz_hs_client_SOURCES = tests/fuzz/fuzz_hs_client.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_hs_client_LDADD = libresihp/libresihp-internal.la
TESTS += tests/fuzz/fuzz_hs_client
EXTRA_DIST += tests/fuzz/corpus-hs-client/forged-proof \
	tests/fuzz/corpus-hs-client/wrong-label
# ... and of the listener's side (resihp__wire_hs_*: AUTH0, AUTH2).
check_PROGRAMS += tests/fuzz/fuzz_hs_server
tests_fuzz_fuzz_hs_server_SOURCES = tests/fuzz/fuzz_hs_server.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_hs_server_LDADD = libresihp/libresihp-internal.la
TESTS += tests/fuzz/fuzz_hs_server
EXTRA_DIST += tests/fuzz/corpus-hs-server/forged-proof \
	tests/fuzz/corpus-hs-server/zero-nonce \
	tests/fuzz/corpus-hs-server/wrong-label \
	tests/fuzz/corpus-hs-server/forged-cookie

# The resumable state (resihp-run --state-dir, --save-every, --resume): the
# coordinator's saves, the files and the rank's side, their unit test and
# the fuzz target of the file headers and meta.
libresihp_libresihp_internal_la_SOURCES += \
	libresihp/control/coord_save.c \
	libresihp/recovery/job_save.h \
	libresihp/recovery/job_save.c
if HAVE_CHECK
check_PROGRAMS += tests/unit/test_job_save
tests_unit_test_job_save_SOURCES = tests/unit/test_job_save.c
tests_unit_test_job_save_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_job_save_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_job_save
check_PROGRAMS += tests/unit/test_coord_save
tests_unit_test_coord_save_SOURCES = tests/unit/test_coord_save.c
tests_unit_test_coord_save_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_coord_save_LDADD = $(UNIT_LDADD)
TESTS += tests/unit/test_coord_save
endif
check_PROGRAMS += tests/fuzz/fuzz_save
tests_fuzz_fuzz_save_SOURCES = tests/fuzz/fuzz_save.c \
	tests/fuzz/fuzz_driver.c tests/fuzz/fuzz_driver.h
tests_fuzz_fuzz_save_LDADD = libresihp/libresihp-internal.la
TESTS += tests/fuzz/fuzz_save
EXTRA_DIST += tests/fuzz/corpus-save/meta tests/fuzz/corpus-save/header \
	tests/fuzz/corpus-save/meta-bad
dist_check_SCRIPTS += tests/integration/resume.test \
	tests/integration/torch-resume.test
TESTS += tests/integration/resume.test tests/integration/torch-resume.test
