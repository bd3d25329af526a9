#!/usr/bin/env node
// kafkajs driver for the tern compat suite (called by compat/test_kafkajs.py).
//
//   node run.js produce '{"broker":"127.0.0.1:9092","topic":"t","compression":"gzip","idempotent":false,"count":40}'
//   node run.js admin   '{"broker":"127.0.0.1:9092","topic":"t"}'
//
// Prints exactly one JSON object on stdout; kafkajs logs go to stderr.
// Byte fields (keys, values, header values) are printed base64-encoded.
//
// Reading back: kafkajs only has a consumer-group consumer, and tern has no group
// APIs yet, so records are read through kafkajs's own Cluster/Broker objects
// (ListOffsets + Fetch, decoded by kafkajs's record-batch decoder and codecs).
// See FINDINGS.md.
'use strict'

const {
  Kafka,
  CompressionTypes,
  CompressionCodecs,
  ConfigResourceTypes,
  logLevel,
} = require('kafkajs')
const Cluster = require('kafkajs/src/cluster')
const { createLogger } = require('kafkajs/src/loggers')

// Hard cap on the whole run, whatever happens below.
const OVERALL_DEADLINE_MS = 60000
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

function stderrLogCreator() {
  return ({ namespace, level, log }) => {
    const { message, ...extra } = log
    process.stderr.write(`[kafkajs ${level} ${namespace}] ${message} ${JSON.stringify(extra)}\n`)
  }
}

// Client defaults (timeouts, retries), so the producer runs as users run it; the whole
// run is bounded by OVERALL_DEADLINE_MS instead.
function newKafka(broker) {
  return new Kafka({
    clientId: 'tern-compat-kafkajs',
    brokers: [broker],
    logLevel: logLevel.WARN,
    logCreator: stderrLogCreator,
  })
}

function newCluster(broker) {
  return new Cluster({
    logger: createLogger({ level: logLevel.WARN, logCreator: stderrLogCreator }),
    socketFactory: require('kafkajs/src/network/socketFactory')(),
    brokers: [broker],
    clientId: 'tern-compat-kafkajs-reader',
    connectionTimeout: 3000,
    requestTimeout: 10000,
    enforceRequestTimeout: true,
    metadataMaxAge: 300000,
    retry: { retries: 3, initialRetryTime: 200, maxRetryTime: 2000 },
    allowAutoTopicCreation: false,
    maxInFlightRequests: null,
    isolationLevel: 1,
  })
}

const EARLIEST = -2
const LATEST = -1

// Reads every record of every partition of `topic`, from the log start offset up to
// the high watermark, using kafkajs's Broker.listOffsets and Broker.fetch.
async function readAll(broker, topic) {
  const cluster = newCluster(broker)
  await cluster.connect()
  try {
    await cluster.addTargetTopic(topic)
    await cluster.refreshMetadata()
    const partitionIds = cluster
      .findTopicPartitionMetadata(topic)
      .map(p => p.partitionId)
      .sort((a, b) => a - b)
    const byLeader = cluster.findLeaderForPartitions(topic, partitionIds)
    const result = {}
    for (const [nodeId, partitions] of Object.entries(byLeader)) {
      const leader = await cluster.findBroker({ nodeId })
      const listed = async timestamp => {
        const r = await leader.listOffsets({
          replicaId: -1,
          isolationLevel: 1,
          topics: [{ topic, partitions: partitions.map(partition => ({ partition, timestamp })) }],
        })
        const out = {}
        for (const p of r.responses[0].partitions) {
          if (p.errorCode) throw new Error(`ListOffsets error ${p.errorCode} on ${topic}/${p.partition}`)
          out[p.partition] = BigInt(p.offset)
        }
        return out
      }
      const starts = await listed(EARLIEST)
      const ends = await listed(LATEST)
      for (const partition of partitions) {
        const records = []
        let next = starts[partition]
        const end = ends[partition]
        const deadline = Date.now() + 20000
        for (let round = 0; round < 200 && next < end; round++) {
          if (Date.now() > deadline) throw new Error(`fetch of ${topic}/${partition} timed out at ${next}/${end}`)
          const r = await leader.fetch({
            replicaId: -1,
            isolationLevel: 1,
            maxWaitTime: 500,
            minBytes: 1,
            maxBytes: 1048576,
            topics: [{ topic, partitions: [{ partition, fetchOffset: next.toString(), maxBytes: 1048576 }] }],
          })
          const p = r.responses[0].partitions[0]
          if (p.errorCode) throw new Error(`Fetch error ${p.errorCode} on ${topic}/${partition} at ${next}`)
          for (const m of p.messages) {
            const off = BigInt(m.offset)
            if (off < next || m.isControlRecord) continue // whole batches come back
            if (off !== next) throw new Error(`offset gap on ${topic}/${partition}: expected ${next}, got ${off}`)
            const headers = {}
            for (const [k, v] of Object.entries(m.headers || {})) {
              headers[k] = Array.isArray(v) ? v.map(b64) : b64(v)
            }
            records.push({
              offset: m.offset,
              timestamp: m.timestamp,
              key: b64(m.key),
              value: b64(m.value),
              headers,
            })
            next = off + 1n
          }
        }
        result[partition] = {
          logStartOffset: starts[partition].toString(),
          highWatermark: end.toString(),
          records,
        }
      }
    }
    return result
  } finally {
    await cluster.disconnect()
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
  const partitions = await readAll(broker, topic)
  return { available, before, after, sent, metadata, partitions }
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

async function main() {
  const [mode, json] = process.argv.slice(2)
  const args = JSON.parse(json || '{}')
  let result
  if (mode === 'produce') result = await produce(args)
  else if (mode === 'admin') result = await admin(args)
  else if (mode === 'codecs') result = { available: await registerCodecs() }
  else throw new Error(`unknown mode ${mode}`)
  process.stdout.write(JSON.stringify(result) + '\n')
}

main().then(
  () => process.exit(0),
  err => {
    process.stderr.write(`run.js failed: ${err && err.stack ? err.stack : err}\n`)
    process.stdout.write(JSON.stringify({ error: String(err && err.message ? err.message : err), name: err && err.name }) + '\n')
    process.exit(1)
  }
)
