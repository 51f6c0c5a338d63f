/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_claim.h — at most one paid provider call per input across every replica
 * of a stage: a lease on the input, kept in Redis.
 *
 * Before a provider call a stage claims the input (its idempotency key: the
 * stage, the message key and the input's digest). The claim is a Redis key
 * holding the claimant's owner id with a TTL (the lease), renewed while the
 * call runs and deleted by its owner once the outputs are stored (or the
 * call ended without anything to store). A replica that finds a live claim
 * does not call: it waits, asking again, until the outputs are stored (it
 * reuses them) or the claim is gone (its owner died: it claims and calls).
 * So two replicas holding the same message at once (a rebalance that gave a
 * partition away while a call ran, a lost session) pay once; a crash costs
 * a second call only after the dead owner's lease expires.
 *
 * A call that failed for good (a dead letter: nothing stored for reuse, so
 * that a replay of the dead letter calls again) does not just delete its
 * claim: once its outputs (the dead letter) are acknowledged by Kafka, its
 * owner replaces the claim by an end mark, "!<topic>/<partition>/<offset>|
 * <error class>", for stage.claim_lease_ms + kafka.session_timeout_ms. A
 * replica waiting on that input (the same message: the same topic,
 * partition and offset) reads the mark and ends the input without calling
 * and without a second dead letter; any other message of the input (a
 * replay, a retry copy) takes the claim over the mark and calls.
 *
 * A renewal answers per claim: extended, taken again (the key had gone,
 * an eviction or a Redis that lost writes, and no outputs are stored), or
 * lost (another owner holds it, or outputs or an end mark are there). A
 * lost claim is the caller's to act on: a job that has not called yet
 * claims again before calling (and so waits for the other owner).
 *
 * Keys:
 *   sl:claim:<stage>:<key>:<digest32>   owner id (or an end mark); PX = the lease
 *   sl:idem:<stage>:<key>:<digest32>    the stored outputs (sl_stage)
 * The owner id is unique per job (process id + random + a sequence), so two
 * jobs of one process for the same input do not share a claim; it never
 * begins with '!'.
 *
 * ---- Script contract: sl_claim_take_lua ---------------------------------
 *   EVAL sl_claim_take_lua 4N <claim key 1> <stored key 1> <starts key 1>
 *        <data key 1> ... <claim key N> <stored key N> <starts key N>
 *        <data key N> <lease ms> <starts ttl s>
 *        <owner 1> ... <owner N> <tag 1> ... <tag N>
 *   claims N inputs at once (a stage sends the claims of one turn of its
 *   loop together: SL_CLAIM_BATCH at most); tag i is "<topic>/<partition>/
 *   <offset>" of input i's message; starts key i is sl_idem_starts_key's
 *   for an input whose start is to be counted with its claim (the count of
 *   stage.max_starts, as sl_claim_starts_lua counts), else a key that
 *   does not begin with "sl:" ("" or the batch's bare bucket tag, see
 *   below); data key i is sl_dkey_rkey's for an input whose submission's
 *   data key is read with its claim (sl_stage_opts.data_key), else such a
 *   placeholder. Reply: a flat array of N triples {code, value, data key}
 *   in the order of the inputs, the data key's value ("" when it is not
 *   there or was not asked for) whatever the code, and:
 *     1, outputs   the outputs are stored already: reuse them, no call
 *     0, starts    claimed (or already ours: the lease is extended; or an
 *                  end mark of another message, replaced): call; starts is
 *                  the input's count so far, this start included ("" when
 *                  it was not to be counted)
 *     2, ms        someone else holds it for ms more: ask again later
 *     3, class     this very message failed for good on another replica
 *                  and its dead letter is written: end it, no call
 * ---- sl_claim_release_lua ------------------------------------------------
 *   EVAL sl_claim_release_lua 1 <claim key> <owner>: deletes the claim when
 *   it is still ours. Reply: integer 1 deleted, 0 not ours (or gone).
 * ---- sl_claim_renew_lua --------------------------------------------------
 *   EVAL sl_claim_renew_lua 2N <claim key 1> <stored key 1> ... <lease ms>
 *        <owner 1> ...: for each input, in order, an integer:
 *     1  still the owner's: extended
 *     2  the key was gone and no outputs are stored: taken again
 *     0  lost: another owner, an end mark, or stored outputs
 * ---- sl_claim_end_lua ----------------------------------------------------
 *   EVAL sl_claim_end_lua 1 <claim key> <owner> <end mark> <ttl ms>:
 *   replaces the claim by the end mark when it is still ours. Reply:
 *   integer 1 replaced, 0 not ours (or gone).
 * ---- sl_claim_store_lua --------------------------------------------------
 *   EVAL sl_claim_store_lua 3N <stored key 1> <claim key 1> <starts key 1>
 *        ... <stored key N> <claim key N> <starts key N> <ttl s>
 *        <outputs 1> <owner 1> ... <outputs N> <owner N>
 *   stores each input's outputs (SET EX), deletes its start count (a
 *   starts key not beginning with "sl:" for none: its run is over once its
 *   outputs are stored),
 *   then deletes its claim when it is still the owner's: one round trip
 *   where calls end, the outputs always stored before the claim goes (a
 *   waiting replica finds them). An empty owner stores only (an input not
 *   claimed). A stage sends the stores of one turn of its loop together
 *   (SL_STORE_BATCH at most). Reply: an array of N integers, in order: 1
 *   the claim was released, 0 it was not the owner's (or gone), -1 no
 *   owner given.
 * ---- sl_claim_starts_lua -------------------------------------------------
 *   EVAL sl_claim_starts_lua N+D <starts key 1> ... <starts key N>
 *        <ended key 1> ... <ended key D> <ttl s> <N>
 *   first deletes the D counts of inputs that ended (their keys are
 *   sl_idem_starts_key's: the runtime deletes an input's count when it
 *   finishes, here with the next counts when there are some, so one round
 *   trip does both), then counts one more start of each of the N inputs
 *   (INCR; a new key gets the TTL) and replies an array of N integers, in
 *   order: the starts so far, this one included (stage.max_starts). A stage
 *   sends the starts of one turn of its loop together (SL_CLAIM_BATCH at
 *   most, and at most SL__REDIS_SCRIPT_MAX_ARGS - 2 keys in all).
 * ---- sl_claim_lookup_lua ------------------------------------------------
 *   EVAL sl_claim_lookup_lua 2 <stored key> <starts key> <ttl s>
 *   the idempotency lookup and the start count in one round trip, for a
 *   stage whose inputs run as soon as they are looked up (no provider gate
 *   between): {1, outputs} the outputs are stored (nothing counted), or
 *   {0, starts} as sl_claim_starts_lua counts.
 *
 * ---- Redis Cluster (redis.buckets > 0) -----------------------------------
 * A cluster runs a script only when its keys share a slot, and routes it by
 * its KEYS. The keys of one input carry its submission's bucket tag
 * (sl_idem.h), so they share a slot; a batch of several inputs (take,
 * renew, store, starts, and the DEL of ended counts) holds the inputs of
 * one bucket only (the runtime splits a turn's batch by bucket; with
 * redis.buckets = 0 every input is in bucket 0 and a batch is as before),
 * and a key that is "none" is the bucket's bare tag ("{3-17}"), a name no
 * script reads or writes, in the batch's slot ("" has slot 0). Every key a
 * script touches is in its KEYS; none of them mixes an input's key with a
 * global one.
 */
#ifndef SLUICE_SL_CLAIM_H
#define SLUICE_SL_CLAIM_H

#include <stddef.h>

extern const char sl_claim_take_lua[];
extern const char sl_claim_release_lua[];
extern const char sl_claim_renew_lua[];
extern const char sl_claim_end_lua[];
extern const char sl_claim_store_lua[];
extern const char sl_claim_starts_lua[];
extern const char sl_claim_lookup_lua[];

/* Inputs claimed by one sl_claim_take_lua (6 arguments each, plus the lease
 * and the TTL: within SL__REDIS_SCRIPT_MAX_ARGS). */
#define SL_CLAIM_BATCH 12
/* Inputs stored by one sl_claim_store_lua (5 arguments each, plus the TTL). */
#define SL_STORE_BATCH 12

/* Reply codes of sl_claim_take_lua. */
enum { SL_CLAIM_CLAIMED = 0, SL_CLAIM_STORED = 1, SL_CLAIM_HELD = 2, SL_CLAIM_ENDED = 3 };

/* Answers of sl_claim_renew_lua, per claim. */
enum { SL_RENEW_LOST = 0, SL_RENEW_EXTENDED = 1, SL_RENEW_RETAKEN = 2 };

#endif
