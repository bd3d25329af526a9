#!/usr/bin/env node
// kafkajs driver for the tern compat suite (called by compat/test_kafkajs.py and
// compat/test_groups.py).
//
//   node run.js produce '{"broker":"127.0.0.1:9092","topic":"t","compression":"gzip","idempotent":false,"count":40}'
//   node run.js admin   '{"broker":"127.0.0.1:9092","topic":"t"}'
//   node run.js member  '{"broker":"127.0.0.1:9092","topic":"t","group":"g","sessionTimeout":6000}'
//   node run.js session '{"broker":"127.0.0.1:9092","topic":"t","group":"g","commit":"auto","stopAfter":20}'
//   node run.js txn     '{"broker":"127.0.0.1:9092","topic":"t","id":"tx","commit":10,"abort":5}'
//   node run.js acl-probe '{"broker":..,"granted":"alice.t","other":"other.t","groups":["g"],"caFile":..,"sasl":{..}}'
//
// Any mode connects over TLS when ARGS has "caFile" (the CA's PEM file) and authenticates
// when it has "sasl" (kafkajs's own option: {"mechanism":"scram-sha-512","username":..,
// "password":..}; also scram-sha-256 and plain), e.g. produce over SASL_SSL.
//
// produce/admin/codecs/acl-probe print exactly one JSON object on stdout. member/session print one JSON
// object per line as things happen (same events as compat/group_worker.py: start, assign,
// revoke, msg, commit, committed, error, closed) and a last {"ev":"exit"} line.
// kafkajs logs go to stderr. Byte fields (keys, values, header values) are printed
// base64-encoded by produce.
//
// Records are read back with kafkajs's real consumer (a consumer group member: FindCoordinator,
// JoinGroup, SyncGroup, Heartbeat, OffsetFetch, Fetch). See FINDINGS.md.
'use strict'

const fs = require('fs')
const { Kafka, CompressionTypes, CompressionCodecs, ConfigResourceTypes, logLevel } = require('kafkajs')

const [MODE, ARGS_JSON] = process.argv.slice(2)
const ARGS = JSON.parse(ARGS_JSON || '{}')

// Hard cap on the whole run, whatever happens below (member mode runs longer: deadlineMs).
const OVERALL_DEADLINE_MS = ARGS.deadlineMs || 60000
setTimeout(() => {
  process.stderr.write(`run.js: overall deadline of ${OVERALL_DEADLINE_MS} ms exceeded\n`)
  process.exit(3)
}, OVERALL_DEADLINE_MS).unref()

// ---- codecs ------------------------------------------------------------------
// gzip is built into kafkajs. The others are plugins, all free of native builds:
//   snappy: kafkajs-snappy (pure JS, snappyjs)
//   lz4:    @2l/kafkajs-lz4 (lz4-napi, prebuilt binary shipped as a package)
//   zstd:   @bokuweb/zstd-wasm (WebAssembly), wrapped in a codec below
async function registerCodecs() {
  const available = ['none', 'gzip']
  try {
    CompressionCodecs[CompressionTypes.Snappy] = require('kafkajs-snappy')
    available.push('snappy')
  } catch (e) {
    process.stderr.write(`snappy codec unavailable: ${e.message}\n`)
  }
  try {
    const LZ4Codec = require('@2l/kafkajs-lz4')
    CompressionCodecs[CompressionTypes.LZ4] = new LZ4Codec().codec
    available.push('lz4')
  } catch (e) {
    process.stderr.write(`lz4 codec unavailable: ${e.message}\n`)
  }
  try {
    const zstd = require('@bokuweb/zstd-wasm')
    await zstd.init()
    CompressionCodecs[CompressionTypes.ZSTD] = () => ({
      compress: async encoder => Buffer.from(zstd.compress(encoder.buffer, 3)),
      decompress: async buffer => Buffer.from(zstd.decompress(buffer)),
    })
    available.push('zstd')
  } catch (e) {
    process.stderr.write(`zstd codec unavailable: ${e.message}\n`)
  }
  return available
}

const COMPRESSION = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD,
}

// ---- helpers -----------------------------------------------------------------
const b64 = buf => (buf == null ? null : Buffer.from(buf).toString('base64'))

// Every ERROR kafkajs logs (e.g. a broker's refusal it then swallows), for acl-probe.
const LOGGED_ERRORS = []

function stderrLogCreator() {
  return ({ namespace, level, log }) => {
    const { message, ...extra } = log
    if (level === logLevel.ERROR) LOGGED_ERRORS.push({ namespace, message, error: extra.error || null })
    process.stderr.write(`[kafkajs ${level} ${namespace}] ${message} ${JSON.stringify(extra)}\n`)
  }
}

// TLS and SASL from ARGS (see the top of this file); none for a PLAINTEXT listener.
function securityOptions() {
  const options = {}
  if (ARGS.caFile) options.ssl = { ca: [fs.readFileSync(ARGS.caFile, 'utf-8')] }
  if (ARGS.sasl) options.sasl = ARGS.sasl
  return options
}

// Client defaults (timeouts, retries), so the producer runs as users run it; the whole
// run is bounded by OVERALL_DEADLINE_MS instead.
function newKafka(broker) {
  return new Kafka({
    clientId: 'tern-compat-kafkajs',
    brokers: [broker],
    logLevel: logLevel.WARN,
    logCreator: stderrLogCreator,
    ...securityOptions(),
  })
}

function emit(ev, fields = {}) {
  process.stdout.write(JSON.stringify({ ev, ...fields }) + '\n')
}

function withDeadline(promise, ms, what) {
  let timer
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not done within ${ms} ms`)), ms)
  })
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer))
}

// Resolves when stdin reaches EOF (the test closed it, or died) or on SIGTERM.
function stopRequested() {
  return new Promise(resolve => {
    process.once('SIGTERM', resolve)
    process.stdin.on('data', () => {})
    process.stdin.once('end', resolve)
    process.stdin.once('error', resolve)
    process.stdin.resume()
  })
}

// Reads every record of every partition of `topic`, from the log start offset up to the
// high watermark, with a real kafkajs consumer in a fresh group (fromBeginning). Offsets
// must come back contiguous and exactly once.
async function readAll(kafka, topic) {
  const adm = kafka.admin()
  await adm.connect()
  let offsets
  try {
    offsets = await adm.fetchTopicOffsets(topic) // [{ partition, offset, high, low }]
  } finally {
    await adm.disconnect()
  }
  const result = {}
  const next = {}
  for (const o of offsets) {
    result[o.partition] = { logStartOffset: o.low, highWatermark: o.high, records: [] }
    next[o.partition] = BigInt(o.low)
  }
  const complete = () => offsets.every(o => next[o.partition] >= BigInt(o.high))
  let failure = null
  let finish
  const done = new Promise(resolve => (finish = resolve))
  const consumer = kafka.consumer({
    groupId: `tern-compat-read-${process.pid}-${Date.now()}`,
    maxWaitTimeInMs: 500,
  })
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    if (complete()) finish()
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        const off = BigInt(message.offset)
        if (off !== next[partition]) {
          failure = failure || new Error(`${topic}/${partition}: expected offset ${next[partition]}, got ${off}`)
          finish()
          return
        }
        const headers = {}
        for (const [k, v] of Object.entries(message.headers || {})) {
          headers[k] = Array.isArray(v) ? v.map(b64) : b64(v)
        }
        result[partition].records.push({
          offset: message.offset,
          timestamp: message.timestamp,
          key: b64(message.key),
          value: b64(message.value),
          headers,
        })
        next[partition] = off + 1n
        if (complete()) finish()
      },
    })
    await withDeadline(done, 30000, `reading ${topic} with a kafkajs consumer`)
  } finally {
    await consumer.disconnect()
  }
  if (failure) throw failure
  return result
}

function groupConsumer(kafka, args) {
  return kafka.consumer({
    groupId: args.group,
    sessionTimeout: args.sessionTimeout || 6000,
    heartbeatInterval: args.heartbeatInterval || 1000,
    rebalanceTimeout: args.rebalanceTimeout || 60000,
    // kafkajs heartbeats between fetches: a short fetch wait keeps heartbeats on time.
    maxWaitTimeInMs: 500,
  })
}

function reportGroupEvents(consumer, topic) {
  const { GROUP_JOIN, REBALANCING, CRASH, COMMIT_OFFSETS } = consumer.events
  consumer.on(GROUP_JOIN, e => {
    const parts = (e.payload.memberAssignment[topic] || []).slice().sort((x, y) => x - y)
    emit('assign', { partitions: parts, memberId: e.payload.memberId, isLeader: e.payload.isLeader })
  })
  consumer.on(REBALANCING, () => emit('revoke', { partitions: null }))
  consumer.on(CRASH, e => emit('error', { error: String(e.payload.error), restart: e.payload.restart }))
  const commits = []
  consumer.on(COMMIT_OFFSETS, e => {
    for (const t of e.payload.topics) {
      if (t.topic !== topic) continue
      for (const p of t.partitions) commits.push({ partition: Number(p.partition), offset: Number(p.offset) })
    }
  })
  return commits
}

async function committedOffsets(kafka, group, topic) {
  const adm = kafka.admin()
  await adm.connect()
  try {
    const res = await adm.fetchOffsets({ groupId: group, topics: [topic] })
    const out = {}
    for (const t of res) {
      for (const p of t.partitions) out[String(p.partition)] = Number(p.offset) >= 0 ? Number(p.offset) : null
    }
    return out
  } finally {
    await adm.disconnect()
  }
}

// The error a kafkajs call failed with, down its cause chain: kafkajs wraps a broker's
// refusal (KafkaJSProtocolError, with the error code's `type`) in retrier errors.
function describeError(e) {
  const chain = []
  for (let cur = e; cur && chain.length < 5; cur = cur.originalError || cur.cause) {
    chain.push({ name: cur.name, type: cur.type || null, message: String(cur.message) })
  }
  return { name: e.name, type: (chain.find(c => c.type) || {}).type || null, chain }
}

async function outcome(promise, ms, what) {
  try {
    await withDeadline(promise, ms, what)
    return { ok: true }
  } catch (e) {
    return { ok: false, error: describeError(e) }
  }
}

// ---- modes -------------------------------------------------------------------
async function produce(args) {
  const { broker, topic, compression = 'none', idempotent = false, count = 40, fixedTimestamp } = args
  const available = await registerCodecs()
  if (!available.includes(compression)) {
    return { skipped: `codec ${compression} not available`, available }
  }
  const kafka = newKafka(broker)
  // Client defaults, except idempotence when asked.
  const producer = kafka.producer(idempotent ? { idempotent: true } : {})
  await producer.connect()
  const sent = []
  const metadata = []
  const before = Date.now()
  try {
    // Several sends, so the topic gets several batches.
    const perSend = Math.max(1, Math.ceil(count / 4))
    for (let start = 0; start < count; start += perSend) {
      const messages = []
      for (let i = start; i < Math.min(count, start + perSend); i++) {
        const m = {
          key: `key-${i % 7}`,
          value: `kafkajs ${compression} message ${i} ` + 'x'.repeat(i % 50),
          headers: { h: `v${i}`, 'trace-id': `t-${i}` },
        }
        if (fixedTimestamp && i % 10 === 0) m.timestamp = String(fixedTimestamp)
        messages.push(m)
        sent.push({
          key: b64(Buffer.from(m.key)),
          value: b64(Buffer.from(m.value)),
          headers: { h: b64(Buffer.from(m.headers.h)), 'trace-id': b64(Buffer.from(m.headers['trace-id'])) },
          timestamp: m.timestamp || null,
        })
      }
      const md = await producer.send({
        topic,
        acks: -1,
        compression: COMPRESSION[compression],
        messages,
      })
      metadata.push(...md)
    }
  } finally {
    await producer.disconnect()
  }
  const after = Date.now()
  const partitions = await readAll(kafka, topic)
  return { available, before, after, sent, metadata, partitions }
}

// A transactional producer: one transaction of `commit` messages committed, one of
// `abort` messages aborted (sent, then aborted), one more of `commit` committed; then the
// values a read_committed and a read_uncommitted consumer see (each reads until it has
// the count it should have, then a second more, so extras show).
async function txn(args) {
  const { broker, topic, id, commit = 10, abort = 5 } = args
  const kafka = newKafka(broker)
  const producer = kafka.producer({ transactionalId: id, idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const batch = (prefix, n) => Array.from({ length: n }, (_, i) => ({ key: `k${i}`, value: `${prefix}-${i}` }))
  try {
    let t = await producer.transaction()
    await t.send({ topic, messages: batch('c1', commit) })
    await t.commit()
    t = await producer.transaction()
    await t.send({ topic, messages: batch('a', abort) })
    await t.abort()
    t = await producer.transaction()
    await t.send({ topic, messages: batch('c2', commit) })
    await t.commit()
  } finally {
    await producer.disconnect()
  }
  const read = async (readUncommitted, want) => {
    const seen = []
    const consumer = kafka.consumer({
      groupId: `tern-compat-txn-${readUncommitted}-${process.pid}-${Date.now()}`,
      maxWaitTimeInMs: 300,
      readUncommitted,
    })
    await consumer.connect()
    let enough
    const reached = new Promise(resolve => (enough = resolve))
    try {
      await consumer.subscribe({ topics: [topic], fromBeginning: true })
      await consumer.run({
        autoCommit: false,
        eachMessage: async ({ message }) => {
          seen.push(message.value.toString())
          if (seen.length >= want) enough()
        },
      })
      await withDeadline(reached, 20000, `reading ${want} values of ${topic}`).catch(() => {})
      await new Promise(resolve => setTimeout(resolve, 1000))
    } finally {
      await consumer.disconnect()
    }
    return seen
  }
  const committed = await read(false, 2 * commit)
  const uncommitted = await read(true, 2 * commit + abort)
  return { committed, uncommitted }
}

async function admin(args) {
  const { broker, topic } = args
  const kafka = newKafka(broker)
  const adm = kafka.admin()
  await adm.connect()
  const out = {}
  try {
    out.created = await adm.createTopics({
      waitForLeaders: true,
      timeout: 10000,
      topics: [
        {
          topic,
          numPartitions: 3,
          replicationFactor: 1,
          configEntries: [{ name: 'retention.ms', value: '3600000' }],
        },
      ],
    })
    // A second create of the same topic must not claim to have created it.
    out.createdAgain = await adm.createTopics({
      waitForLeaders: false,
      topics: [{ topic, numPartitions: 3, replicationFactor: 1 }],
    })
    out.metadata = await adm.fetchTopicMetadata({ topics: [topic] })
    const configs = await adm.describeConfigs({
      includeSynonyms: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic }],
    })
    out.configs = configs.resources.map(r => ({
      errorCode: r.errorCode,
      resourceName: r.resourceName,
      entries: r.configEntries.map(e => ({ name: e.configName, value: e.configValue })),
    }))
    await adm.createPartitions({ topicPartitions: [{ topic, count: 5 }] })
    out.metadataAfterCreatePartitions = await adm.fetchTopicMetadata({ topics: [topic] })
    out.offsets = await adm.fetchTopicOffsets(topic)
    out.topicsBeforeDelete = await adm.listTopics()
    await adm.deleteTopics({ topics: [topic], timeout: 10000 })
    out.topicsAfterDelete = await adm.listTopics()
  } finally {
    await adm.disconnect()
  }
  return out
}

// One group member: consume (auto commit) until stdin reaches EOF, SIGTERM or deadlineMs.
async function member(args) {
  const { broker, topic } = args
  const kafka = newKafka(broker)
  const consumer = groupConsumer(kafka, args)
  reportGroupEvents(consumer, topic)
  const stop = stopRequested()
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    autoCommitInterval: 1000,
    eachMessage: async ({ partition, message }) =>
      emit('msg', { p: partition, o: Number(message.offset), v: message.value ? message.value.toString() : '' }),
  })
  await stop
  await consumer.disconnect() // LeaveGroup
  emit('closed')
  return { ev: 'exit' }
}

// Process stopAfter records, commit them (auto: kafkajs commits resolved offsets after each
// batch; manual: consumer.commitOffsets(last processed + 1)), read the committed offsets back
// (admin.fetchOffsets = OffsetFetch), leave the group.
async function session(args) {
  const { broker, topic, group, commit = 'auto', stopAfter } = args
  const kafka = newKafka(broker)
  const consumer = groupConsumer(kafka, args)
  const commits = reportGroupEvents(consumer, topic)
  let processed = 0
  const last = {}
  let finish
  const done = new Promise(resolve => (finish = resolve))
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({
      autoCommit: commit === 'auto',
      eachBatchAutoResolve: false,
      eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
        for (const m of batch.messages) {
          if (processed >= stopAfter || !isRunning() || isStale()) break
          processed++
          last[batch.partition] = Number(m.offset)
          emit('msg', { p: batch.partition, o: Number(m.offset), v: m.value ? m.value.toString() : '' })
          resolveOffset(m.offset) // auto commit commits resolved offsets (+1) at the end of the batch
        }
        if (processed >= stopAfter) {
          consumer.pause([{ topic }]) // nothing more is fetched or handed to us
          finish()
        }
        await heartbeat()
      },
    })
    try {
      await withDeadline(done, 40000, `processing ${stopAfter} records`)
    } catch (e) {
      emit('error', { error: `deadline: processed only ${processed} of ${stopAfter}` })
    }
    const wanted = Object.entries(last).map(([p, o]) => ({ topic, partition: Number(p), offset: String(o + 1) }))
    if (commit === 'manual' && wanted.length) {
      try {
        await consumer.commitOffsets(wanted)
        emit('commit', { offsets: Object.fromEntries(wanted.map(w => [String(w.partition), Number(w.offset)])), error: null })
      } catch (e) {
        emit('commit', { offsets: null, error: String(e) })
      }
    } else if (commit === 'auto') {
      // Wait (bounded) for the runner's end-of-batch auto commit to cover what was processed.
      const covered = () =>
        wanted.every(w => commits.some(c => c.partition === w.partition && c.offset >= Number(w.offset)))
      const t0 = Date.now()
      while (!covered() && Date.now() - t0 < 10000) await new Promise(r => setTimeout(r, 100))
    }
  } finally {
    await consumer.disconnect() // LeaveGroup
  }
  emit('committed', { offsets: await committedOffsets(kafka, group, topic) })
  emit('closed')
  return { ev: 'exit' }
}

// Under ACLs (compat/test_security.py): produce one record to `granted` and one to
// `other`, list topics and fetch `other`'s metadata, then try a group member in each of
// `groups`. Each step's outcome is reported (ok, or the error's name and protocol type),
// each bounded. A member reports the CRASH event kafkajs emits when it cannot join, and
// the errors kafkajs logged meanwhile.
async function tryMember(kafka, group, topic) {
  const consumer = kafka.consumer({ groupId: group, retry: { retries: 2 }, maxWaitTimeInMs: 500 })
  let crashed
  const crash = new Promise(resolve => (crashed = resolve))
  consumer.on(consumer.events.CRASH, e => crashed({ error: describeError(e.payload.error), restart: e.payload.restart }))
  consumer.on(consumer.events.GROUP_JOIN, () => crashed({ joined: true }))
  await withDeadline(consumer.connect(), 15000, 'consumer connect')
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({ eachMessage: async () => {} })
    return await withDeadline(crash, 20000, `a member of ${group} to join or crash`)
  } finally {
    await consumer.disconnect()
  }
}

async function aclProbe(args) {
  const { broker, granted, other, groups } = args
  const kafka = newKafka(broker)
  const out = {}
  const producer = kafka.producer({ retry: { retries: 2 } })
  await withDeadline(producer.connect(), 15000, 'producer connect')
  try {
    for (const [key, topic] of [['granted', granted], ['other', other]]) {
      out[key] = await outcome(
        producer.send({ topic, acks: -1, messages: [{ value: `acl-probe ${key}` }] }), 15000, `send to ${topic}`)
    }
  } finally {
    await producer.disconnect()
  }
  const adm = kafka.admin({ retry: { retries: 2 } })
  await withDeadline(adm.connect(), 15000, 'admin connect')
  try {
    out.listTopics = await withDeadline(adm.listTopics(), 15000, 'listTopics')
    out.otherMetadata = await outcome(adm.fetchTopicMetadata({ topics: [other] }), 15000, 'fetchTopicMetadata')
  } finally {
    await adm.disconnect()
  }
  out.members = {}
  for (const group of groups) {
    LOGGED_ERRORS.length = 0
    out.members[group] = await tryMember(kafka, group, granted)
    out.members[group].loggedErrors = LOGGED_ERRORS.slice()
  }
  return out
}

async function main() {
  let result
  if (MODE === 'produce') result = await produce(ARGS)
  else if (MODE === 'admin') result = await admin(ARGS)
  else if (MODE === 'codecs') result = { available: await registerCodecs() }
  else if (MODE === 'acl-probe') result = await aclProbe(ARGS)
  else if (MODE === 'txn') result = await txn(ARGS)
  else if (MODE === 'member' || MODE === 'session') {
    emit('start', { client: 'kafkajs', mode: MODE, pid: process.pid })
    result = MODE === 'member' ? await member(ARGS) : await session(ARGS)
  } else throw new Error(`unknown mode ${MODE}`)
  process.stdout.write(JSON.stringify(result) + '\n')
}

main().then(
  () => process.exit(0),
  err => {
    process.stderr.write(`run.js failed: ${err && err.stack ? err.stack : err}\n`)
    process.stdout.write(JSON.stringify({ ev: 'exit', error: String(err && err.message ? err.message : err), name: err && err.name }) + '\n')
    process.exit(1)
  }
)
