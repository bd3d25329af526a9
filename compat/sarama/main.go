// Command sarama-compat drives tern with Debian's Sarama 1.22 set to Kafka 2.2.0, the
// way Sarama's own ClusterAdmin, SyncProducer, consumer group and offset manager do,
// then reads the group's position back as a consumer-lag monitor does (ListOffsets v0,
// OffsetFetch v0 and v1). It prints one JSON report on stdout; compat/test_sarama.py
// asserts on it. Any error exits with status 1 and the error on stderr.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

type partitionReport struct {
	Partition int32 `json:"partition"`
	// ListOffsets v0, time -1 (latest) and -2 (earliest), max_num_offsets 1.
	NewestV0   int64 `json:"newest_v0"`
	EarliestV0 int64 `json:"earliest_v0"`
	// ListOffsets v0, time -1 with max_num_offsets 10: Kafka's legacy offset list.
	NewestListV0 []int64 `json:"newest_list_v0"`
	// ListOffsets v1 through the client, for comparison.
	NewestV1 int64 `json:"newest_v1"`
	// OffsetFetch v1 (what the offset manager reads) and v0.
	CommittedV1 int64  `json:"committed_v1"`
	CommittedV0 int64  `json:"committed_v0"`
	Metadata    string `json:"metadata"`
	Lag         int64  `json:"lag"`
}

type report struct {
	ListedPartitions int32             `json:"listed_partitions"`
	ListedConfigs    map[string]string `json:"listed_configs"`
	Produced         int               `json:"produced"`
	ProducedPer      map[int32]int     `json:"produced_per_partition"`
	Consumed         int               `json:"consumed"`
	ConsumedUnique   int               `json:"consumed_unique"`
	Partitions       []partitionReport `json:"partitions"`
	TotalLag         int64             `json:"total_lag"`
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

type handler struct {
	mu     sync.Mutex
	seen   map[string]bool
	total  int
	want   int
	cancel context.CancelFunc
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *handler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		sess.MarkMessage(msg, "sarama-compat")
		h.mu.Lock()
		h.total++
		h.seen[string(msg.Value)] = true
		done := len(h.seen) >= h.want
		h.mu.Unlock()
		if done {
			h.cancel()
		}
	}
	return nil
}

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap broker")
	topic := flag.String("topic", "sarama-compat", "topic to create")
	group := flag.String("group", "sarama-compat-group", "consumer group")
	n := flag.Int("n", 100, "messages to produce")
	partitions := flag.Int("partitions", 3, "partitions of the topic")
	flag.Parse()

	config := sarama.NewConfig()
	config.Version = sarama.V2_2_0_0
	config.ClientID = "sarama-compat"
	config.Producer.Return.Successes = true
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Partitioner = sarama.NewHashPartitioner
	config.Consumer.Return.Errors = true
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	config.Consumer.Offsets.CommitInterval = 200 * time.Millisecond
	config.Metadata.Retry.Max = 10
	config.Metadata.Retry.Backoff = 200 * time.Millisecond
	// Consumer.Offsets.Retention stays 0 (the default): the offset manager then
	// commits with OffsetCommit v1, which Kafka 4.0 removed.
	addrs := []string{*brokers}
	out := report{ListedConfigs: map[string]string{}, ProducedPer: map[int32]int{}}

	// Admin: CreateTopics, then ListTopics (Metadata + DescribeConfigs v0).
	admin, err := sarama.NewClusterAdmin(addrs, config)
	if err != nil {
		fail("cluster admin: %v", err)
	}
	retention := "3600000"
	err = admin.CreateTopic(*topic, &sarama.TopicDetail{
		NumPartitions:     int32(*partitions),
		ReplicationFactor: 1,
		ConfigEntries:     map[string]*string{"retention.ms": &retention},
	}, false)
	if err != nil {
		fail("create topic: %v", err)
	}
	topics, err := admin.ListTopics()
	if err != nil {
		fail("list topics: %v", err)
	}
	detail, ok := topics[*topic]
	if !ok {
		fail("list topics: %s missing from %d topics", *topic, len(topics))
	}
	out.ListedPartitions = detail.NumPartitions
	for name, value := range detail.ConfigEntries {
		if value != nil {
			out.ListedConfigs[name] = *value
		}
	}
	if err := admin.Close(); err != nil {
		fail("closing admin: %v", err)
	}

	// SyncProducer: N keyed messages, acks=all.
	producer, err := sarama.NewSyncProducer(addrs, config)
	if err != nil {
		fail("producer: %v", err)
	}
	for i := 0; i < *n; i++ {
		partition, _, err := producer.SendMessage(&sarama.ProducerMessage{
			Topic: *topic,
			Key:   sarama.StringEncoder(fmt.Sprintf("key-%d", i)),
			Value: sarama.StringEncoder(fmt.Sprintf("value-%d", i)),
		})
		if err != nil {
			fail("produce %d: %v", i, err)
		}
		out.Produced++
		out.ProducedPer[partition]++
	}
	if err := producer.Close(); err != nil {
		fail("closing producer: %v", err)
	}

	// Consumer group: consume everything, marking each message; the offset manager
	// commits every 200 ms and once more when the group closes.
	consumerGroup, err := sarama.NewConsumerGroup(addrs, *group, config)
	if err != nil {
		fail("consumer group: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	h := &handler{seen: map[string]bool{}, want: *n, cancel: cancel}
	go func() {
		for err := range consumerGroup.Errors() {
			fmt.Fprintf(os.Stderr, "consumer group error: %v\n", err)
		}
	}()
	for ctx.Err() == nil {
		if err := consumerGroup.Consume(ctx, []string{*topic}, h); err != nil {
			fail("consume: %v", err)
		}
	}
	timedOut := ctx.Err() == context.DeadlineExceeded
	cancel()
	if err := consumerGroup.Close(); err != nil {
		fail("closing consumer group: %v", err)
	}
	out.Consumed = h.total
	out.ConsumedUnique = len(h.seen)
	if timedOut {
		fail("consumed %d of %d messages in 60 s", len(h.seen), *n)
	}

	// Lag monitor: partition offsets by ListOffsets v0, committed offsets by
	// OffsetFetch v1 and v0 from the group's coordinator.
	client, err := sarama.NewClient(addrs, config)
	if err != nil {
		fail("client: %v", err)
	}
	defer client.Close()
	coordinator, err := client.Coordinator(*group)
	if err != nil {
		fail("coordinator: %v", err)
	}
	ids, err := client.Partitions(*topic)
	if err != nil {
		fail("partitions: %v", err)
	}
	for _, p := range ids {
		leader, err := client.Leader(*topic, p)
		if err != nil {
			fail("leader of %d: %v", p, err)
		}
		row := partitionReport{Partition: p}
		legacy := func(at int64, max int32) []int64 {
			req := &sarama.OffsetRequest{Version: 0}
			req.AddBlock(*topic, p, at, max)
			resp, err := leader.GetAvailableOffsets(req)
			if err != nil {
				fail("ListOffsets v0 %d/%d: %v", p, at, err)
			}
			block := resp.GetBlock(*topic, p)
			if block == nil || block.Err != sarama.ErrNoError {
				fail("ListOffsets v0 %d/%d: block %+v", p, at, block)
			}
			return block.Offsets
		}
		newest := legacy(sarama.OffsetNewest, 1)
		earliest := legacy(sarama.OffsetOldest, 1)
		if len(newest) != 1 || len(earliest) != 1 {
			fail("ListOffsets v0 %d: newest %v earliest %v", p, newest, earliest)
		}
		row.NewestV0, row.EarliestV0 = newest[0], earliest[0]
		row.NewestListV0 = legacy(sarama.OffsetNewest, 10)
		if row.NewestV1, err = client.GetOffset(*topic, p, sarama.OffsetNewest); err != nil {
			fail("ListOffsets v1 %d: %v", p, err)
		}
		committed := func(version int16) (int64, string) {
			req := &sarama.OffsetFetchRequest{Version: version, ConsumerGroup: *group}
			req.AddPartition(*topic, p)
			resp, err := coordinator.FetchOffset(req)
			if err != nil {
				fail("OffsetFetch v%d %d: %v", version, p, err)
			}
			block := resp.GetBlock(*topic, p)
			if block == nil || block.Err != sarama.ErrNoError {
				fail("OffsetFetch v%d %d: block %+v", version, p, block)
			}
			return block.Offset, block.Metadata
		}
		row.CommittedV1, row.Metadata = committed(1)
		row.CommittedV0, _ = committed(0)
		row.Lag = row.NewestV0 - row.CommittedV1
		out.TotalLag += row.Lag
		out.Partitions = append(out.Partitions, row)
	}
	encoded, err := json.Marshal(out)
	if err != nil {
		fail("encoding report: %v", err)
	}
	fmt.Println(string(encoded))
}
